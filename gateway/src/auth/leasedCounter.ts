import type { Redis } from 'ioredis'

/**
 * A rate-limit store for @fastify/rate-limit whose counts live in Redis, shared
 * by every gateway replica, without a Redis round trip per request.
 *
 * Each replica claims a lease of requests for a key (one INCRBY) and serves it
 * locally. The lease grows while a key is hot (doubling when used up within
 * 100 ms, up to 64) and shrinks near the limit (at most 1/16 of what is left), so
 * at low rates and near the limit every request is one INCRBY of 1: exact. A lease
 * counts in Redis when claimed, so the replicas together never let more than the
 * limit through; what a replica claimed and did not use is lost for that window
 * (at most 1/16 of the remainder per replica). Once a key is over its limit, the
 * replica answers locally until the window ends: counts only grow within a window.
 * One count per key across all routes. Concurrent claims for one key share one.
 */
const claimScript = `
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = tonumber(ARGV[2])
end
return {total, ttl}`

const maxLease = 64
const hotMs = 100
const coolMs = 1000

interface KeyState {
  /** requests claimed and not yet served */
  left: number
  /** count position of the last request served */
  position: number
  windowEnd: number
  /** the Redis total after the last claim */
  total: number
  size: number
  claimedAt: number
  pending?: Promise<void>
}

type Callback = (error: Error | null, result?: { current: number; ttl: number }) => void

interface LeaseRedis extends Redis {
  claimLease(key: string, size: number, windowMs: number): Promise<[number, number]>
}

export function leasedCounterStore(redis: Redis, namespace: string) {
  const client = redis as LeaseRedis
  if (!client.claimLease) client.defineCommand('claimLease', { numberOfKeys: 1, lua: claimScript })
  const states = new Map<string, KeyState>()
  const sweep = setInterval(() => {
    const now = Date.now()
    for (const [key, state] of states) if (state.windowEnd <= now && !state.pending) states.delete(key)
  }, 5_000)
  sweep.unref()

  const leaseSize = (state: KeyState, max: number, now: number) => {
    const age = now - state.claimedAt
    const wanted = age < hotMs ? state.size * 2 : age > coolMs ? Math.floor(state.size / 2) : state.size
    return Math.max(1, Math.min(wanted, maxLease, Math.floor((max - state.total) / 16)))
  }

  function incr(key: string, cb: Callback, windowMs: number, max: number): void {
    const now = Date.now()
    let state = states.get(key)
    if (state && state.windowEnd <= now && !state.pending) {
      states.delete(key)
      state = undefined
    }
    if (state?.pending) {
      state.pending.then(() => incr(key, cb, windowMs, max))
      return
    }
    if (state && state.left > 0) {
      state.left--
      cb(null, { current: ++state.position, ttl: state.windowEnd - now })
      return
    }
    if (state && state.total >= max) {
      cb(null, { current: state.total + 1, ttl: state.windowEnd - now })
      return
    }
    const current: KeyState = state ?? { left: 0, position: 0, windowEnd: 0, total: 0, size: 1, claimedAt: 0 }
    states.set(key, current)
    const size = state ? leaseSize(current, max, now) : 1
    current.pending = client.claimLease(namespace + key, size, windowMs).then(
      ([total, ttl]) => {
        const before = total - size
        const granted = Math.max(0, Math.min(size, max - before))
        Object.assign(current, { total, size, claimedAt: now, windowEnd: now + ttl, pending: undefined })
        current.left = Math.max(0, granted - 1)
        current.position = before + 1
        cb(null, { current: current.position, ttl })
      },
      (error: Error) => {
        current.pending = undefined
        states.delete(key)
        cb(error)
      },
    )
  }

  /** The class @fastify/rate-limit instantiates; one shared state for every route. */
  return class LeasedCounterStore {
    incr = incr
    child() {
      return this
    }
  }
}

/** Without Redis: the same one-count-per-key semantics, in this process only. */
export function memoryCounterStore() {
  const windows = new Map<string, { count: number; end: number }>()
  const sweep = setInterval(() => {
    const now = Date.now()
    for (const [key, w] of windows) if (w.end <= now) windows.delete(key)
  }, 5_000)
  sweep.unref()
  return class MemoryCounterStore {
    incr(key: string, cb: Callback, windowMs: number) {
      const now = Date.now()
      let w = windows.get(key)
      if (!w || w.end <= now) {
        w = { count: 0, end: now + windowMs }
        windows.set(key, w)
      }
      cb(null, { current: ++w.count, ttl: w.end - now })
    }
    child() {
      return this
    }
  }
}
