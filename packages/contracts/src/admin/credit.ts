import { Type, type Static } from 'typebox'
import { ErrorBody, keyRouteErrors } from '../common/errors.ts'
import { topic } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { Address, EpochMs, IntegerString, StrictObject, StringEnum } from '../common/primitives.ts'
import { route } from '../common/route.ts'

/**
 * Prepaid credit: a wallet tops up once with an x402 payment, then spends the credit request by
 * request (signed in with SIWx, or with a session token from one sign-in). The admin's ledger is
 * authoritative; the gateways debit a fast copy in Redis.
 *
 * Metered work (a /v1 completion, an agent job) is paid by a hold: the gateway takes the most the
 * request may cost from the credit before it is proxied and names the hold in the headers below;
 * the service that did the work reports what it used (`CreditUsage`) once it is done, and the
 * ledger keeps that much and gives the rest of the hold back.
 */
export const creditHeaders = {
  /** the wallet whose credit pays this request (lower-case), set by the gateway */
  wallet: 'x-ats-credit-wallet',
  /** the hold that pays for metered work: its id (the gateway's request id) */
  hold: 'x-ats-credit-hold',
  /** the most the work may cost: the hold's amount, USDC base units (decimal) */
  holdAmount: 'x-ats-credit-hold-amount',
} as const

/** What metered work used, as the service that did it counts it. */
export const CreditUsageDetail = Type.Object({
  /** the model that ran (a /v1 `model`, or the agent's) */
  model: Type.Optional(Type.String({ maxLength: 200 })),
  inputTokens: Type.Integer({ minimum: 0 }),
  outputTokens: Type.Integer({ minimum: 0 }),
  /** agent jobs: the steps (model turns and tool calls) it ran */
  steps: Type.Optional(Type.Integer({ minimum: 0 })),
})
export type CreditUsageDetail = Static<typeof CreditUsageDetail>

/**
 * The end of metered work paid by a hold: `amount` of the hold is kept (at most the hold; 0 for
 * work that failed or was voided), the rest goes back to the wallet. Published on the credit
 * stream with the hold id as the message id; the ledger keeps the first report of a hold.
 */
export const CreditUsage = Type.Object({
  hold: Type.String({ minLength: 1, maxLength: 64, description: 'the hold id (x-ats-credit-hold)' }),
  wallet: Address(),
  amount: IntegerString({ description: 'USDC base units kept from the hold' }),
  usage: CreditUsageDetail,
  /** what the work came to: a /v1 completion answered, a job complete, failed or voided */
  outcome: Type.Union([Type.Literal('complete'), Type.Literal('failed'), Type.Literal('voided')]),
  reason: Type.Optional(Type.String({ maxLength: 2000 })),
  at: EpochMs('when the work ended'),
})
export type CreditUsage = Static<typeof CreditUsage>

/**
 * What a gateway took from a wallet's credit in Redis, in one request: `debit` (a route's price,
 * kept at once), `hold` (the most metered work may cost; the service's `CreditUsage` says how
 * much is kept) or `withdraw` (paid back on chain by the admin; given back if it cannot be).
 * `id` is unique per wallet and movement: the gateway's request id (a hold's id), or the
 * withdrawal's idempotency key; the ledger records each id once.
 */
export const CreditDebit = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  wallet: Address(),
  kind: Type.Union([Type.Literal('debit'), Type.Literal('hold'), Type.Literal('withdraw')]),
  amount: IntegerString({ description: 'USDC base units' }),
  /** method and path of the request it paid for */
  route: Type.String({ maxLength: 300 }),
  at: EpochMs('when the gateway took it'),
})
export type CreditDebit = Static<typeof CreditDebit>

/** One stream message: the debits a gateway made while its previous publish was in flight. */
export const CreditDebits = Type.Object({ debits: Type.Array(CreditDebit, { minItems: 1 }) })
export type CreditDebits = Static<typeof CreditDebits>

/**
 * Credit given to a wallet by the ledger (a settled top-up, what a hold did not use, a
 * withdrawal that could not be paid): gateways add it to their fast copy once (`entry` is the
 * ledger entry's id, increasing; a copy rebuilt at or after an entry already holds it).
 */
export const CreditAdjusted = Type.Object({
  wallet: Address(),
  entry: IntegerString({ description: 'the ledger entry id' }),
  delta: IntegerString({ description: 'USDC base units added' }),
  reason: Type.Union([Type.Literal('topup'), Type.Literal('release'), Type.Literal('refund')]),
  at: EpochMs(),
})
export type CreditAdjusted = Static<typeof CreditAdjusted>

/** admin.credit.snapshot request: a gateway rebuilding its copy of a wallet's credit (after Redis lost it). */
export const CreditSnapshotRequest = Type.Object({ wallet: Address() })

/**
 * admin.credit.snapshot reply, read once the ledger has recorded every debit published before the
 * request: `available` = settled top-ups − debits − holds − withdrawals + releases and refunds;
 * `entry`: the last adjustment entry it includes (adjustments up to it are not added again).
 */
export const CreditSnapshotReply = Type.Object({
  wallet: Address(),
  available: IntegerString(),
  entry: IntegerString(),
})

/** The credit stream (gateways and metered services -> admin, admin -> gateways) and its consumers. */
export function creditChannels(namespace: string) {
  const stream = `${namespace}_credit`
  const debited = topic(subjectOf(namespace, 'credit', 'debited'), CreditDebits)
  const usage = topic(subjectOf(namespace, 'credit', 'usage'), CreditUsage)
  const adjusted = topic(subjectOf(namespace, 'credit', 'adjusted'), CreditAdjusted)
  /** messages a consumer could not handle (undecodable, or failing too often), kept with their reason */
  const deadLetters = subjectOf(namespace, 'credit', 'dead-letter')
  return {
    stream,
    debited,
    usage,
    adjusted,
    deadLetters,
    /** admin's durable consumers of debits and usage reports */
    debitConsumer: 'admin-credit-debits',
    usageConsumer: 'admin-credit-usage',
    /** the gateways' one shared durable consumer of adjustments (any gateway applies each once) */
    adjustedConsumer: 'gateway-credit-adjusted',
    streamSpec: {
      name: stream,
      subjects: [debited.subject, usage.subject, adjusted.subject, deadLetters],
      maxAgeMs: 7 * 86_400_000,
      duplicateWindowMs: 600_000,
    },
  }
}

/** The movements of a wallet's credit, as the ledger records them (each once per wallet, kind and ref). */
export const creditEntryKinds = ['topup', 'debit', 'hold', 'capture', 'release', 'withdraw', 'refund'] as const
export type CreditEntryKind = (typeof creditEntryKinds)[number]

const CreditAmount = (description: string) => IntegerString({ description: `${description}, USDC base units (6 decimals)` })

/** POST /credit/topup's query: how much credit to buy (the x402 price of the request). */
export const CreditTopUpQuery = StrictObject({
  amount: IntegerString({
    maxLength: 15,
    description:
      'USDC base units to add to the credit (1000000 = 1 USDC): the price the 402 asks for, from CREDIT_MIN_TOPUP up to CREDIT_MAX_TOPUP',
  }),
})

/** A top-up whose payment is not settled yet: it is spendable once it is. */
export const PendingTopUp = Type.Object({
  amount: CreditAmount('what the payment adds'),
  nonce: Type.String({ description: "the payment's EIP-3009 nonce" }),
  at: EpochMs('when the top-up was paid'),
})

/** 202 of POST /credit/topup: the payment is charged; the credit comes when it settles. */
export const CreditTopUpAnswer = Type.Object({
  wallet: Address({ description: 'the wallet the credit belongs to: the payer (lower-case)' }),
  amount: CreditAmount('the credit it adds'),
  state: Type.Literal('pending', { description: 'pending until the payment settles on chain; then spendable (webhook credit.topped_up)' }),
  nonce: Type.String({ description: "the payment's EIP-3009 nonce" }),
})

export const CreditEntry = Type.Object({
  id: IntegerString({ description: 'the ledger entry id (increasing)' }),
  kind: StringEnum(creditEntryKinds, {
    description:
      'topup: a settled top-up; debit: a price paid; hold: the most metered work may cost, taken at its start; capture: what the work used, kept from its hold; release: the rest of a hold given back; withdraw: paid back on chain; refund: a withdrawal that could not be paid, given back',
  }),
  amount: CreditAmount('how much moved'),
  ref: Type.String({
    description: 'the request id (debit, hold, capture, release), the payment nonce (topup) or the Idempotency-Key (withdraw, refund)',
  }),
  route: Type.Union([Type.String(), Type.Null()], { description: 'method and path of the request it paid for' }),
  at: EpochMs(),
})
export type CreditEntry = Static<typeof CreditEntry>

/** GET /credit: a wallet's credit. */
export const CreditAccount = Type.Object({
  wallet: Address({ description: 'lower-case' }),
  available: CreditAmount('what can be spent now: balance − held'),
  balance: CreditAmount('the credit owned: settled top-ups − debits − what holds kept − withdrawals + refunds'),
  held: CreditAmount('taken by metered work still running (its unused part comes back when it ends)'),
  pendingTopUps: Type.Array(PendingTopUp, { description: 'paid top-ups waiting for their settlement' }),
  recent: Type.Array(CreditEntry, { description: 'the latest 20 movements, newest first' }),
})
export type CreditAccount = Static<typeof CreditAccount>

export const CreditQuery = StrictObject({
  wallet: Type.Optional(Address({ description: 'admin keys: the wallet to read (others read their own)' })),
})

export const CreditWithdrawBody = StrictObject({
  amount: Type.Optional(IntegerString({ maxLength: 15, description: 'USDC base units to pay back; all that is available when left out' })),
})

/** What became of a withdrawal: paid on chain, still waiting for its block, or refused and given back. */
export const CreditWithdrawal = Type.Object({
  id: Type.String({ description: 'the Idempotency-Key it ran under; a repeat with it answers this again' }),
  wallet: Address({ description: 'lower-case: where the USDC goes' }),
  amount: CreditAmount('paid back'),
  state: Type.Union([Type.Literal('sending'), Type.Literal('paid')], {
    description: 'sending: the transfer is signed and broadcast, waiting for a block (txHash); paid: on chain',
  }),
  txHash: Type.Union([Type.String(), Type.Null()]),
})
export type CreditWithdrawal = Static<typeof CreditWithdrawal>

/** The /credit routes: top up with x402, see the account, withdraw what is unused. */
export const creditRoutes = {
  topUp: route({
    method: 'POST',
    url: '/credit/topup',
    summary:
      'Buy prepaid credit with one x402 payment whose price is `amount`: answered 202 pending; the credit is spendable once the payment settles (webhook credit.topped_up). Then requests are paid from it by signing in with the same wallet (SIWx) or with a session token',
    schema: { querystring: CreditTopUpQuery, response: { 202: CreditTopUpAnswer, 400: ErrorBody, 402: ErrorBody, 429: ErrorBody } },
  }),
  credit: route({
    method: 'GET',
    url: '/credit',
    summary:
      "A wallet's prepaid credit: available, balance, held by running metered work, top-ups waiting for settlement, the latest movements. The wallet signed in (SIWx or session token), a key's bound wallet, or any wallet (?wallet=) for an admin key",
    schema: { querystring: CreditQuery, response: { 200: CreditAccount, 404: ErrorBody, ...keyRouteErrors } },
  }),
  withdraw: route({
    method: 'POST',
    url: '/credit/withdraw',
    summary:
      'Pay unused credit back to the wallet in USDC from the server wallet, on chain, once per Idempotency-Key (sent, or generated and answered). 200 paid, 202 still waiting for its block; refused (423 while the server wallet is paused, 403 over a withdrawal cap, 502 when it could not be sent) and the credit given back',
    schema: {
      body: CreditWithdrawBody,
      response: {
        200: CreditWithdrawal,
        202: CreditWithdrawal,
        402: ErrorBody,
        404: ErrorBody,
        423: ErrorBody,
        502: ErrorBody,
        503: ErrorBody,
        ...keyRouteErrors,
      },
    },
  }),
}
