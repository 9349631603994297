import type { Redis } from 'ioredis'
import { LRUCache } from 'lru-cache'
import { leasedCounterStore, memoryCounterStore } from './leasedCounter.ts'

/**
 * Failed authentications, counted like rate limits (shared through Redis by every gateway). What
 * cannot be attributed to anyone (a malformed or unknown key, a payment header that cannot be read,
 * a signature that does not verify, a payer holding less than one payment) counts against the
 * client address; past its limit the address is refused with 429 for the rest of the window unless
 * its key is already known valid, so a flood of made-up keys costs no lookup at admin. A refused
 * payment whose signer is known (a replay, funds held back by unsettled payments, a blocked payer)
 * counts against that payer only: one client's retries never lock out others behind the same
 * address, and a payer past its limit is refused before its payments cost a chain read.
 */
export interface AuthFailureLimiter {
  /** client addresses */
  addresses: FailureCount
  /** payers (lower-case addresses) */
  payers: FailureCount
}

export interface FailureCount {
  /** seconds until `who` may try again, or undefined when it may now */
  retryAfter(who: string): number | undefined
  /** counts a failure of `who` */
  failed(who: string): Promise<void>
  /** whether anyone is refused now: lets a hot path skip the lookup */
  readonly refusing: boolean
}

export interface AuthFailureOptions {
  redis: Redis | undefined
  /** the fleet's NATS namespace: fleets sharing one Redis count apart */
  namespace: string
  /** failures per client address per window (AUTH_FAILURE_LIMIT) */
  limit: number
  /** refused payments per payer per window (PAYER_FAILURE_LIMIT) */
  payerLimit: number
  windowMs: number
}

export function createAuthFailureLimiter({ redis, namespace, limit, payerLimit, windowMs }: AuthFailureOptions): AuthFailureLimiter {
  return {
    addresses: failureCount(redis, `ats-authfail:${namespace}:`, limit, windowMs),
    payers: failureCount(redis, `ats-payerfail:${namespace}:`, payerLimit, windowMs),
  }
}

function failureCount(redis: Redis | undefined, prefix: string, limit: number, windowMs: number): FailureCount {
  const Store = redis ? leasedCounterStore(redis, prefix) : memoryCounterStore()
  const store = new Store()
  // who -> end of its refusal (ms); entries expire with the window
  const refused = new LRUCache<string, number>({ max: 100_000, ttl: windowMs })
  return {
    retryAfter(who) {
      const until = refused.get(who)
      if (until === undefined) return undefined
      const left = until - Date.now()
      return left > 0 ? Math.ceil(left / 1000) : undefined
    },
    failed(who) {
      return new Promise((resolve) =>
        store.incr(
          who,
          (error, result) => {
            if (!error && result && result.current >= limit) refused.set(who, Date.now() + result.ttl, { ttl: result.ttl })
            resolve()
          },
          windowMs,
          limit,
        ),
      )
    },
    get refusing() {
      return refused.size > 0
    },
  }
}
