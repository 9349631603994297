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

export function cachedLoader<K extends string, V>({ max, ttlMs, load, ttlOf, now }: CachedLoaderOptions<K, V>): CachedLoader<K, V> {
  // lru-cache holds no null or undefined: each value travels in a box
  const cache = new LRUCache<K, { value: V }>({
    max,
    ttl: Math.max(1, ttlMs),
    ...(now ? { perf: { now }, ttlResolution: 0 } : {}),
    fetchMethod: async (key, _stale, { options }) => {
      const value = await load(key)
      if (ttlOf) options.ttl = Math.max(1, ttlOf(value))
      return { value }
    },
  })
  return {
    peek: (key) => cache.get(key)?.value,
    get: async (key) => (await cache.fetch(key))!.value,
    delete: (key) => void cache.delete(key),
    clear: () => cache.clear(),
    get size() {
      return cache.size
    },
  }
}
