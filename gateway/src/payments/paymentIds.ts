// Payment ids (x402's `payment-identifier` extension): a paid request sent again with its id and
// the payment it was first sent with gets the first answer again, and is charged once. One
// record per (payer, id), in Redis for every replica: the request's fingerprint and the payment;
// beside it the answer repeats get, or why they get none. The route runs again only when its
// last answer was an error (not charged), one run at a time.
import { createHash } from 'node:crypto'
import { replicaAcknowledgement } from '@ats/service-kit'
import type { Redis } from 'ioredis'
import type { Address, Hex } from 'viem'
import { PaymentUnavailableError } from '../errors.ts'
import { authorizationJson, type Payment } from './header.ts'
import type { Reservations } from './reservations.ts'

export type PaymentIdClaim =
  /** the first request with this id: its payment's nonce is now claimed; it runs */
  | { kind: 'first' }
  /** the same request with the same payment again: what it gets is its `turn` */
  | { kind: 'repeat' }
  /** the id was first used with another request */
  | { kind: 'conflict' }
  /** the same request under the id with another authorization: only the first one is a repeat */
  | { kind: 'other_payment'; nonce: Hex }
  /** the id is new but its payment's nonce was already used by another request */
  | { kind: 'nonce_used' }

/** An answer kept for repeats: the status, the headers that describe it, the body. */
export interface StoredAnswer {
  status: number
  headers: Record<string, string>
  body: Buffer
}

/** How a run of the request ended, as repeats will see it. */
export type RunOutcome =
  /** answered below 400 (charged): repeats get this answer */
  | { kind: 'answered'; answer: StoredAnswer }
  /** answered below 400 (charged) with what cannot be kept (a stream, too large): repeats are refused with the reason */
  | { kind: 'not_stored'; reason: string }
  /** answered 400 or more (not charged), or never answered: a repeat may run the request again */
  | { kind: 'failed' }

/** What a repeat gets. */
export type RepeatTurn =
  | { kind: 'answer'; answer: StoredAnswer }
  | { kind: 'not_stored'; reason: string }
  /** the request is running (the first time, or again) and did not end within the wait */
  | { kind: 'in_progress' }
  /** its last run failed: this repeat runs it again, alone, paid by the same payment */
  | { kind: 'run' }

export interface PaymentIdStore {
  /**
   * One atomic step across replicas: a record of (payer, id) decides (repeat, conflict or
   * another payment); without one, the payment's nonce is claimed and the record created together.
   */
  claim(payer: Address, id: string, fingerprint: string, payment: Payment): Promise<PaymentIdClaim>
  /** A repeat's turn; while the request is running elsewhere it waits up to `repeatWaitMs` for its end. */
  turn(payer: Address, id: string, nonce: Hex): Promise<RepeatTurn>
  /** Records how a run ended. An answer (or the reason there is none) is final: nothing replaces it. */
  ended(payer: Address, id: string, nonce: Hex, outcome: RunOutcome): Promise<void>
}

export interface PaymentIdStoreOptions {
  /** shared by all replicas */
  redis: Redis
  /**
   * a first use also finds the nonce unused on chain and the payer funded beyond what is
   * reserved, and reserves its value with the nonce claim and the record (a repeat reserves
   * nothing again)
   */
  reservations: Reservations
  /** the fleet's NATS namespace: fleets sharing a Redis keep their ids apart */
  namespace: string
  /** how long an id (and its answer) is remembered after its first use */
  ttlMs: number
  /** how long a repeat waits for a run in progress to end before it is told to retry (2 s) */
  repeatWaitMs?: number
}

const PAYMENT_ID_KEY_PREFIX = 'ats-x402-id:'

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

const encode = (fingerprint: string, payment: Payment): string =>
  JSON.stringify({ fingerprint, payment: { ...payment, authorization: authorizationJson(payment.authorization) } } satisfies StoredRecord)

/** A repeat is the same request with the same signed authorization; the signature covers every field of it. */
function decide(stored: string, fingerprint: string, payment: Payment): PaymentIdClaim {
  const record = JSON.parse(stored) as StoredRecord
  if (record.fingerprint !== fingerprint) return { kind: 'conflict' }
  const first = record.payment
  if (first.signature !== payment.signature || first.authorization.nonce !== payment.authorization.nonce)
    return { kind: 'other_payment', nonce: first.authorization.nonce as Hex }
  return { kind: 'repeat' }
}

// The answer slot of a run, beside the record: absent while the first run is in progress,
// `running` while a repeat runs it again, `failed` when a run answered an error, else the JSON
// of the answer or of why there is none (final).
const RUNNING = 'running'
const FAILED = 'failed'
type Slot = { status: number; headers: Record<string, string>; body: string } | { notStored: string }

// KEYS: slot. ARGV: TTL ms. A failed run is taken over by this repeat (one at a time); returns
// 'run', or the slot as it is (nil while the first run is in progress).
const turnScript = `
local slot = redis.call('GET', KEYS[1])
if slot == '${FAILED}' then
  redis.call('SET', KEYS[1], '${RUNNING}', 'PX', ARGV[1])
  return 'run'
end
return slot`

// KEYS: slot. ARGV: the outcome, TTL ms. A final outcome (JSON) is never replaced.
const endScript = `
local slot = redis.call('GET', KEYS[1])
if slot and string.sub(slot, 1, 1) == '{' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`

type ScriptedRedis = Redis & {
  paymentIdTurn(slot: string, ttlMs: number): Promise<string | null>
  paymentIdEnd(slot: string, outcome: string, ttlMs: number): Promise<number>
}

const slotOf = (outcome: RunOutcome): string => {
  if (outcome.kind === 'failed') return FAILED
  if (outcome.kind === 'not_stored') return JSON.stringify({ notStored: outcome.reason } satisfies Slot)
  const { status, headers, body } = outcome.answer
  return JSON.stringify({ status, headers, body: body.toString('base64') } satisfies Slot)
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export function createPaymentIdStore({
  redis,
  reservations,
  namespace,
  ttlMs,
  repeatWaitMs = 2_000,
}: PaymentIdStoreOptions): PaymentIdStore {
  const keyOf = (payer: Address, id: string) => `${PAYMENT_ID_KEY_PREFIX}${namespace}:${payer.toLowerCase()}:${id}`
  // the answer of the record's payment: a record made again after the id expired has another nonce
  const slotKeyOf = (payer: Address, id: string, nonce: Hex) => `${keyOf(payer, id)}:answer:${nonce.toLowerCase()}`
  redis.defineCommand('paymentIdTurn', { numberOfKeys: 1, lua: turnScript })
  redis.defineCommand('paymentIdEnd', { numberOfKeys: 1, lua: endScript })
  const scripted = redis as ScriptedRedis
  // with Sentinel, a slot written counts once a replica holds it (a failover would forget it otherwise)
  const acknowledgement = replicaAcknowledgement(redis)
  // fail closed: without the answer slot a repeat could run the request again uncharged
  const stored = <T>(step: () => Promise<T>): Promise<T> =>
    step().catch((error: Error) => {
      throw new PaymentUnavailableError(`payment id store unavailable: ${error.message}`, { cause: error })
    })

  const turnOnce = async (slotKey: string): Promise<RepeatTurn> => {
    const acknowledged = acknowledgement?.()
    const slot = await stored(() => scripted.paymentIdTurn(slotKey, ttlMs))
    if (slot === 'run') {
      // a run taken over and then forgotten by a failover could be taken over again: two runs at once
      if (acknowledged)
        await stored(() =>
          acknowledged().catch(async (error: Error) => {
            // given back for the next repeat (if the primary still answers): not this one's turn after all
            await scripted.paymentIdEnd(slotKey, FAILED, ttlMs).catch(() => undefined)
            throw error
          }),
        )
      return { kind: 'run' }
    }
    if (slot === null || slot === RUNNING) return { kind: 'in_progress' }
    const value = JSON.parse(slot) as Slot
    if ('notStored' in value) return { kind: 'not_stored', reason: value.notStored }
    return { kind: 'answer', answer: { status: value.status, headers: value.headers, body: Buffer.from(value.body, 'base64') } }
  }

  return {
    async claim(payer, id, fingerprint, payment) {
      const outcome = await reservations.reserve(payment, payer, { key: keyOf(payer, id), value: encode(fingerprint, payment), ttlMs })
      if (outcome.kind === 'record') return decide(outcome.existing, fingerprint, payment)
      return outcome.kind === 'ok' ? { kind: 'first' } : { kind: 'nonce_used' }
    },

    async turn(payer, id, nonce) {
      const slotKey = slotKeyOf(payer, id, nonce)
      const deadline = Date.now() + repeatWaitMs
      for (let wait = 25; ; wait = Math.min(wait * 2, 250)) {
        const turn = await turnOnce(slotKey)
        if (turn.kind !== 'in_progress' || Date.now() + wait > deadline) return turn
        await pause(wait)
      }
    },

    async ended(payer, id, nonce, outcome) {
      await stored(async () => {
        const acknowledged = acknowledgement?.()
        await scripted.paymentIdEnd(slotKeyOf(payer, id, nonce), slotOf(outcome), ttlMs)
        if (acknowledged) await acknowledged()
      })
    },
  }
}
