// Payment ids (x402's `payment-identifier` extension): a paid request sent again with the id it
// was first paid with is answered again and charged once. One record per (payer, id), in Redis
// for every replica, holding the request's fingerprint and the payment that paid for it.
import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import { LRUCache } from 'lru-cache'
import type { Address, Hex } from 'viem'
import { PaymentUnavailableError } from '../errors.ts'
import type { Payment } from './header.ts'
import { nonceKeyOf, nonceTtlMs, type NonceStore } from './nonces.ts'
import type { Reservations } from './reservations.ts'

export type PaymentIdClaim =
  /** the first request with this id: its payment's nonce is now claimed */
  | { kind: 'first' }
  /** the same request again: answer it, paid by `first` (whose nonce was claimed), nothing new claimed */
  | { kind: 'repeat'; first: Payment }
  /** the id was first used with another request */
  | { kind: 'conflict' }
  /** the id is new but its payment's nonce was already used by another request */
  | { kind: 'nonce_used' }

export interface PaymentIdStore {
  /**
   * One atomic step across replicas: a record of (payer, id) decides (repeat or conflict);
   * without one, the payment's nonce is claimed and the record created together.
   */
  claim(payer: Address, id: string, fingerprint: string, payment: Payment): Promise<PaymentIdClaim>
  /** true for the first call per (payer, id): the one answer below 400 that charges the id's payment */
  charge(payer: Address, id: string): Promise<boolean>
}

export interface PaymentIdStoreOptions {
  /** shared by all replicas; without it records are per process (`nonces` must then be the verifier's store) */
  redis?: Redis
  nonces: NonceStore
  /**
   * with Redis, the gateway's: a first use also finds the nonce unused on chain and the payer
   * funded beyond what is reserved, and reserves its value with the nonce claim and the record
   * (a repeat reserves nothing again)
   */
  reservations?: Reservations
  /** the fleet's NATS namespace: fleets sharing a Redis keep their ids apart */
  namespace: string
  /** how long an id is remembered after its first use */
  ttlMs: number
  now?: () => number
}

export const PAYMENT_ID_KEY_PREFIX = 'ats-x402-id:'

/** The request a payment id was first used with: method, path and query, content type and body bytes. */
export function requestFingerprint(method: string, url: string, contentType: string | undefined, body: Buffer): string {
  return createHash('sha256')
    .update(JSON.stringify([method, url, contentType ?? '']))
    .update('\n')
    .update(body)
    .digest('hex')
}

interface StoredRecord {
  fingerprint: string
  payment: Omit<Payment, 'authorization'> & { authorization: Record<keyof Payment['authorization'], string> }
}

const encode = (fingerprint: string, payment: Payment): string => {
  const { authorization: a, ...rest } = payment
  const authorization = { ...a, value: String(a.value), validAfter: String(a.validAfter), validBefore: String(a.validBefore) }
  return JSON.stringify({ fingerprint, payment: { ...rest, authorization } } satisfies StoredRecord)
}

function decide(stored: string, fingerprint: string): PaymentIdClaim {
  const record = JSON.parse(stored) as StoredRecord
  if (record.fingerprint !== fingerprint) return { kind: 'conflict' }
  const a = record.payment.authorization
  const authorization = {
    from: a.from as Hex,
    to: a.to as Hex,
    value: BigInt(a.value),
    validAfter: BigInt(a.validAfter),
    validBefore: BigInt(a.validBefore),
    nonce: a.nonce as Hex,
  }
  return { kind: 'repeat', first: { ...record.payment, authorization } }
}

// KEYS: record, nonce. ARGV: record, record TTL ms, nonce TTL ms. Returns the existing record,
// 0 when the nonce is taken, 1 when both were created.
const claimScript = `
local existing = redis.call('GET', KEYS[1])
if existing then return existing end
if not redis.call('SET', KEYS[2], '1', 'PX', ARGV[3], 'NX') then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`

type ScriptedRedis = Redis & {
  claimPaymentId(record: string, nonce: string, value: string, ttlMs: number, nonceTtlMs: number): Promise<string | number>
}

export function createPaymentIdStore({
  redis,
  nonces,
  reservations,
  namespace,
  ttlMs,
  now = Date.now,
}: PaymentIdStoreOptions): PaymentIdStore {
  const keyOf = (payer: Address, id: string) => `${PAYMENT_ID_KEY_PREFIX}${namespace}:${payer.toLowerCase()}:${id}`
  if (redis) {
    redis.defineCommand('claimPaymentId', { numberOfKeys: 2, lua: claimScript })
    const scripted = redis as ScriptedRedis
    // fail closed, as the nonce store does: without the record a payment could pay twice
    const unavailable = (error: unknown) =>
      new PaymentUnavailableError(`payment id store unavailable: ${(error as Error).message}`, { cause: error })
    return {
      async claim(payer, id, fingerprint, payment) {
        if (reservations) {
          const outcome = await reservations.reserve(payment, payer, { key: keyOf(payer, id), value: encode(fingerprint, payment), ttlMs })
          if (outcome.kind === 'record') return decide(outcome.existing, fingerprint)
          return outcome.kind === 'ok' ? { kind: 'first' } : { kind: 'nonce_used' }
        }
        const a = payment.authorization
        let result: string | number
        try {
          result = await scripted.claimPaymentId(
            keyOf(payer, id),
            nonceKeyOf(a.from, a.nonce),
            encode(fingerprint, payment),
            ttlMs,
            nonceTtlMs(a.validBefore, now()),
          )
        } catch (error) {
          throw unavailable(error)
        }
        if (typeof result === 'string') return decide(result, fingerprint)
        return result === 1 ? { kind: 'first' } : { kind: 'nonce_used' }
      },
      async charge(payer, id) {
        try {
          return (await redis.set(`${keyOf(payer, id)}:charged`, '1', 'PX', ttlMs, 'NX')) === 'OK'
        } catch (error) {
          throw unavailable(error)
        }
      },
    }
  }

  const records = new LRUCache<string, string>({ max: 100_000, ttl: ttlMs, perf: { now } })
  const charged = new LRUCache<string, true>({ max: 100_000, ttl: ttlMs, perf: { now } })
  // claims of one key run one after another, so a record is only seen once its nonce is claimed
  const queues = new Map<string, Promise<unknown>>()
  const inTurn = <T>(key: string, step: () => Promise<T>): Promise<T> => {
    const turn = (queues.get(key) ?? Promise.resolve()).then(step)
    const settled = turn.catch(() => {})
    queues.set(key, settled)
    void settled.then(() => {
      if (queues.get(key) === settled) queues.delete(key)
    })
    return turn
  }
  return {
    claim: (payer, id, fingerprint, payment) =>
      inTurn(keyOf(payer, id), async (): Promise<PaymentIdClaim> => {
        const existing = records.get(keyOf(payer, id))
        if (existing !== undefined) return decide(existing, fingerprint)
        const a = payment.authorization
        if (!(await nonces.claim(a.from, a.nonce, a.validBefore))) return { kind: 'nonce_used' }
        records.set(keyOf(payer, id), encode(fingerprint, payment))
        return { kind: 'first' }
      }),
    async charge(payer, id) {
      const key = keyOf(payer, id)
      if (charged.has(key)) return false
      charged.set(key, true)
      return true
    },
  }
}
