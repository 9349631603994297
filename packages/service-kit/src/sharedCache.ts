// The cache every replica of a service shares (Redis): one upstream call per key and ttl, fleet-wide.
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import { LRUCache } from 'lru-cache'
import { SharedFailure, isRegistryError } from './errors.ts'
import type { Logger } from './logger.ts'

export interface CacheHit<V> {
  value: V
  /** true when this answer was read from the cache; false when this call's load made it */
  cached: boolean
  /** when the value was loaded (ms since the epoch) */
  storedAt: number
}

export interface SharedCache {
  /**
   * The value of `key` while it is fresh (ttlMs from its load), else the result of one load
   * for the whole fleet: concurrent misses in this process share one promise, and across
   * processes one replica loads (it holds a Redis lock) while the others wait for its answer.
   * A registry error (an upstream's 502/503) is shared for `errorTtlMs` the same way, so a
   * failing upstream is not called once per replica and request either.
   */
  get<V>(key: string, ttlMs: number, load: () => Promise<V>): Promise<CacheHit<V>>
  /** forgets `key` everywhere */
  delete(key: string): Promise<void>
}

export interface SharedCacheOptions {
  /** without Redis (REDIS_URL unset) each replica caches on its own */
  redis: Redis | undefined
  /** keys are `<prefix>:<key>`: a fleet's namespace and the service, e.g. `ats:market-data` */
  prefix: string
  log: Logger
  /** the longest a load may take: the lock's lifetime, and how long other replicas wait for it */
  lockMs?: number
  /** how often a waiting replica looks for the loader's answer */
  pollMs?: number
  /** how long a failure is shared */
  errorTtlMs?: number
}

type Stored = { at: number; exp: number } & ({ value: unknown } | { error: { statusCode: number; code: string; message: string } })

// deletes the lock only while it is still ours (it may have expired and been taken by another)
const releaseScript = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

/** What the loader threw, told apart from Redis failing. */
class LoadFailed {
  constructor(readonly error: unknown) {}
}

export function createSharedCache({
  redis,
  prefix,
  log,
  lockMs = 15_000,
  pollMs = 20,
  errorTtlMs = 2000,
}: SharedCacheOptions): SharedCache {
  // each replica keeps what it read until the stored expiry: hits cost no Redis round trip
  const memory = new LRUCache<string, Stored>({ max: 1000 })
  const flights = new Map<string, Promise<CacheHit<unknown>>>()

  const answer = <V>(stored: Stored, cached: boolean): CacheHit<V> => {
    if ('error' in stored) {
      const { statusCode, code, message } = stored.error
      throw Object.assign(new SharedFailure(message), { statusCode, code })
    }
    return { value: stored.value as V, cached, storedAt: stored.at }
  }

  const fresh = (key: string): Stored | undefined => {
    const stored = memory.get(key)
    if (stored && stored.exp > Date.now()) return stored
    if (stored) memory.delete(key)
    return undefined
  }

  async function read(redis: Redis, dataKey: string, key: string): Promise<Stored | undefined> {
    const raw = await redis.get(dataKey)
    if (raw === null) return undefined
    const stored = JSON.parse(raw) as Stored
    memory.set(key, stored)
    return stored
  }

  async function loadAndStore<V>(redis: Redis, dataKey: string, key: string, ttlMs: number, load: () => Promise<V>): Promise<CacheHit<V>> {
    const at = Date.now()
    let value: V
    try {
      value = await load()
    } catch (error) {
      if (isRegistryError(error)) {
        const stored: Stored = {
          at,
          exp: Date.now() + errorTtlMs,
          error: { statusCode: error.statusCode, code: error.code, message: error.message },
        }
        await redis.set(dataKey, JSON.stringify(stored), 'PX', errorTtlMs).catch(() => undefined)
      }
      throw new LoadFailed(error)
    }
    const stored: Stored = { at, exp: at + ttlMs, value }
    memory.set(key, stored)
    await redis.set(dataKey, JSON.stringify(stored), 'PX', ttlMs)
    return { value, cached: false, storedAt: at }
  }

  async function resolve<V>(redis: Redis, key: string, ttlMs: number, load: () => Promise<V>): Promise<CacheHit<V>> {
    const dataKey = `${prefix}:${key}`
    const lockKey = `${dataKey}:loading`
    for (;;) {
      const stored = await read(redis, dataKey, key)
      if (stored) return answer<V>(stored, true)
      const token = randomUUID()
      if (await redis.set(lockKey, token, 'PX', lockMs, 'NX')) {
        try {
          // another replica may have stored it between our read and our lock
          const late = await read(redis, dataKey, key)
          if (late) return answer<V>(late, true)
          return await loadAndStore(redis, dataKey, key, ttlMs, load)
        } finally {
          await redis.eval(releaseScript, 1, lockKey, token).catch(() => undefined)
        }
      }
      // another replica is loading: wait for its answer, or for its lock to go (it died)
      const deadline = Date.now() + lockMs
      while (Date.now() < deadline) {
        await sleep(pollMs)
        const stored = await read(redis, dataKey, key)
        if (stored) return answer<V>(stored, true)
        if (!(await redis.exists(lockKey))) break
      }
    }
  }

  async function loadHere<V>(key: string, ttlMs: number, load: () => Promise<V>): Promise<CacheHit<V>> {
    const at = Date.now()
    const value = await load()
    memory.set(key, { at, exp: at + ttlMs, value })
    return { value, cached: false, storedAt: at }
  }

  async function flight<V>(key: string, ttlMs: number, load: () => Promise<V>): Promise<CacheHit<V>> {
    if (!redis) return loadHere(key, ttlMs, load)
    try {
      return await resolve(redis, key, ttlMs, load)
    } catch (error) {
      if (error instanceof LoadFailed) throw error.error
      if (isRegistryError(error)) throw error
      // Redis is away: this replica still answers, caching on its own until Redis is back
      log.warn({ err: { message: (error as Error).message }, key }, 'shared cache unavailable; loading without it')
      return loadHere(key, ttlMs, load)
    }
  }

  return {
    async get<V>(key: string, ttlMs: number, load: () => Promise<V>): Promise<CacheHit<V>> {
      const stored = fresh(key)
      if (stored) return answer<V>(stored, true)
      let running = flights.get(key) as Promise<CacheHit<V>> | undefined
      if (!running) {
        running = flight(key, ttlMs, load)
        flights.set(key, running)
        void running.then(
          () => flights.delete(key),
          () => flights.delete(key),
        )
      }
      return running
    },
    async delete(key: string) {
      memory.delete(key)
      await redis?.del(`${prefix}:${key}`)
    },
  }
}
