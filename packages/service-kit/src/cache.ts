import { LRUCache } from 'lru-cache'

/**
 * The one cached loader of the fleet (lru-cache underneath): bounded, entries expire after
 * their ttl, and concurrent misses for one key share one load. `peek` answers from memory
 * only, for hot paths that must not await when the value is there.
 */
export interface CachedLoader<K extends string, V> {
  /** the cached value while fresh, else undefined (no load) */
  peek(key: K): V | undefined
  /** the cached value, or the result of one shared load */
  get(key: K): Promise<V>
  /** caches a value known from elsewhere (a broadcast, a fresher read): a load in flight for the key gives way to it */
  set(key: K, value: V): void
  delete(key: K): void
  clear(): void
  readonly size: number
}

export interface CachedLoaderOptions<K extends string, V> {
  max: number
  ttlMs: number
  load(key: K): Promise<V>
  /** a ttl per value (e.g. shorter for negative answers); defaults to ttlMs */
  ttlOf?: (value: V) => number
  /** the clock, for tests */
  now?: () => number
}

/** how many times a get starts over when the load it waits for is superseded */
const SUPERSEDED_RETRIES = 5

export function cachedLoader<K extends string, V>({ max, ttlMs, load, ttlOf, now }: CachedLoaderOptions<K, V>): CachedLoader<K, V> {
  const ttlFor = (value: V) => Math.max(1, ttlOf ? ttlOf(value) : ttlMs)
  // lru-cache aborts a load in flight when its key is deleted, set or evicted, and rejects every
  // caller waiting for it with the abort's reason ('deleted'): those reasons are kept here, so a
  // caller asks again (the newer value, or a new load) instead of failing
  const superseded = new WeakSet<object>()
  // lru-cache holds no null or undefined: each value travels in a box
  const cache = new LRUCache<K, { value: V }>({
    max,
    ttl: Math.max(1, ttlMs),
    ...(now ? { perf: { now }, ttlResolution: 0 } : {}),
    fetchMethod: async (key, _stale, { options, signal }) => {
      signal.addEventListener('abort', () => superseded.add(signal.reason as object), { once: true })
      const value = await load(key)
      options.ttl = ttlFor(value)
      return { value }
    },
  })
  return {
    peek: (key) => cache.get(key)?.value,
    async get(key) {
      for (let attempt = 0; ; attempt++) {
        try {
          return (await cache.fetch(key))!.value
        } catch (error) {
          if (!superseded.has(error as object) || attempt === SUPERSEDED_RETRIES) throw error
        }
      }
    },
    set: (key, value) => void cache.set(key, { value }, { ttl: ttlFor(value) }),
    delete: (key) => void cache.delete(key),
    clear: () => cache.clear(),
    get size() {
      return cache.size
    },
  }
}
