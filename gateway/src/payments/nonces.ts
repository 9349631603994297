import type { Redis } from 'ioredis'
import { PaymentUnavailableError } from '../errors.ts'

/** Claims an EIP-3009 nonce once across every gateway replica. */
export interface NonceStore {
  /** true for the first claim of (from, nonce), false for every later one until validBefore has passed */
  claim(from: string, nonce: string, validBefore: bigint): Promise<boolean>
}

export const NONCE_KEY_PREFIX = 'ats-x402:'
/** the Redis key of a claimed nonce (the payment-id store claims nonces with the same keys) */
export const nonceKeyOf = (from: string, nonce: string) => `${NONCE_KEY_PREFIX}${from.toLowerCase()}:${nonce.toLowerCase()}`
/** how long a claim is kept past validBefore, against clock skew between replicas and the chain */
export const NONCE_MARGIN_MS = 60_000
/** how long the claim of a nonce valid until `validBefore` (unix seconds) is kept from `now` (ms) */
export const nonceTtlMs = (validBefore: bigint, now: number, marginMs = NONCE_MARGIN_MS) =>
  Math.max(1, Number(validBefore) * 1000 + marginMs - now)

export interface NonceStoreOptions {
  /** shared by all replicas; without it claims are per process */
  redis?: Redis
  /** kept this long after validBefore, against clock skew between replicas and the chain */
  marginMs?: number
  now?: () => number
}

export function createNonceStore({ redis, marginMs = NONCE_MARGIN_MS, now = Date.now }: NonceStoreOptions = {}): NonceStore {
  const ttlMs = (validBefore: bigint) => nonceTtlMs(validBefore, now(), marginMs)
  if (redis) {
    return {
      async claim(from, nonce, validBefore) {
        try {
          // one atomic create: a read-then-write would let two replicas both see "unused"
          return (await redis.set(nonceKeyOf(from, nonce), '1', 'PX', ttlMs(validBefore), 'NX')) === 'OK'
        } catch (error) {
          // fail closed: without the store a nonce could be spent twice
          throw new PaymentUnavailableError(`nonce store unavailable: ${(error as Error).message}`, { cause: error })
        }
      },
    }
  }
  const used = new Map<string, number>()
  let claimsSinceSweep = 0
  const sweep = () => {
    const t = now()
    for (const [key, expires] of used) if (expires <= t) used.delete(key)
  }
  return {
    async claim(from, nonce, validBefore) {
      if (++claimsSinceSweep >= 10_000) {
        claimsSinceSweep = 0
        sweep()
      }
      const key = nonceKeyOf(from, nonce)
      const expires = used.get(key)
      if (expires !== undefined && expires > now()) return false
      used.set(key, now() + ttlMs(validBefore))
      return true
    },
  }
}
