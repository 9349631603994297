import type { Redis } from 'ioredis'
import { LRUCache } from 'lru-cache'
import { leasedCounterStore, memoryCounterStore } from './leasedCounter.ts'

/**
 * Failed authentications per client address, counted like rate limits (shared through Redis by
 * every gateway). Past the limit an address is refused with 429 for the rest of the window
 * unless its key is already known valid: a flood of made-up keys costs no lookup at admin.
 */
export interface AuthFailureLimiter {
  /** seconds until this address may try unknown keys again, or undefined when it may now */
  retryAfter(ip: string): number | undefined
  /** counts a failed authentication of this address */
  failed(ip: string): Promise<void>
}

export interface AuthFailureOptions {
  redis: Redis | undefined
  /** the fleet's NATS namespace: fleets sharing one Redis count apart */
  namespace: string
  limit: number
  windowMs: number
}

export function createAuthFailureLimiter({ redis, namespace, limit, windowMs }: AuthFailureOptions): AuthFailureLimiter {
  const Store = redis ? leasedCounterStore(redis, `ats-authfail:${namespace}:`) : memoryCounterStore()
  const store = new Store()
  // address -> end of its refusal (ms); entries expire with the window
  const refused = new LRUCache<string, number>({ max: 100_000, ttl: windowMs })
  return {
    retryAfter(ip) {
      const until = refused.get(ip)
      if (until === undefined) return undefined
      const left = until - Date.now()
      return left > 0 ? Math.ceil(left / 1000) : undefined
    },
    failed(ip) {
      return new Promise((resolve) =>
        store.incr(
          ip,
          (error, result) => {
            if (!error && result && result.current >= limit) refused.set(ip, Date.now() + result.ttl, { ttl: result.ttl })
            resolve()
          },
          windowMs,
          limit,
        ),
      )
    },
  }
}
