import { Type, type Static } from 'typebox'
import { codec } from './codec.ts'
import type { Topic } from './messages.ts'
import { subjectsFor } from './subjects.ts'

/**
 * x402 payment events (gateway -> JetStream -> admin) and the shared list of blocked
 * payers, in the fleet's NATS namespace.
 */
export interface PaymentChannels {
  /** JetStream stream holding charged payments */
  stream: string
  /** the subject gateways publish charged payments on, in batches */
  charged: Topic<PaymentsCharged>
  /** the KV bucket of payers refused at the edge (key: lower-case address) */
  blockedPayers: string
  /** the durable consumer through which admin records payments */
  ledgerConsumer: string
  /** the stream's configuration, ensured by every publisher and consumer at start */
  streamSpec: { name: string; subjects: string[]; maxAgeMs: number; duplicateWindowMs: number }
}

const Address = Type.String({ pattern: '^0x[0-9a-fA-F]{40}$' })
const Uint = Type.String({ pattern: '^[0-9]{1,78}$' })

/**
 * One charged payment: enough to record, report and settle it (on chain or through a
 * facilitator). What it earns is `authorization.value`: EIP-3009 moves the whole value.
 */
export const PaymentCharged = Type.Object({
  payer: Address,
  payTo: Address,
  asset: Address,
  chainId: Type.Integer(),
  /** the network the client named: a v1 short name or a CAIP-2 id */
  network: Type.String(),
  x402Version: Type.Union([Type.Literal(1), Type.Literal(2)]),
  authorization: Type.Object({
    from: Address,
    to: Address,
    value: Uint,
    validAfter: Uint,
    validBefore: Uint,
    nonce: Type.String({ pattern: '^0x[0-9a-fA-F]{64}$' }),
  }),
  signature: Type.String({ pattern: '^0x[0-9a-fA-F]{130}$' }),
  method: Type.String(),
  /** path of the paid request, without the query */
  route: Type.String(),
  /** absolute URL offered as `resource` in the requirements; a facilitator gets it back */
  resource: Type.String(),
  requestId: Type.String(),
  chargedAt: Type.Integer({ description: 'ms since the Unix epoch' }),
})
export type PaymentCharged = Static<typeof PaymentCharged>

/**
 * One stream message: the payments a gateway charged while its previous publish was in
 * flight (one alone when traffic is light). Batching keeps JetStream's cost per paid
 * request small; the ledger's unique (payer, nonce) keeps every payment recorded once.
 */
export const PaymentsCharged = Type.Object({ charges: Type.Array(PaymentCharged, { minItems: 1 }) })
export type PaymentsCharged = Static<typeof PaymentsCharged>

const chargedCodec = codec(PaymentsCharged)

const day = 86_400_000

export function paymentChannels(namespace: string): PaymentChannels {
  const { payments } = subjectsFor(namespace)
  return {
    stream: payments.stream,
    charged: { subject: payments.charged, message: chargedCodec },
    blockedPayers: payments.blockedPayers,
    ledgerConsumer: 'admin-ledger',
    // kept a week, so an admin outage of days loses nothing; a republished batch within
    // 10 minutes is dropped by JetStream, anything else by the ledger's unique (payer, nonce)
    streamSpec: { name: payments.stream, subjects: [payments.charged], maxAgeMs: 7 * day, duplicateWindowMs: 600_000 },
  }
}

/** JetStream's de-duplication id of a batch: a batch published again (a retry) is stored once. */
export const paymentsMessageId = ({ charges }: PaymentsCharged) => {
  const first = charges[0]!.authorization
  return `${first.from.toLowerCase()}:${first.nonce.toLowerCase()}:${charges.length}`
}

/** Why a payer is refused at the edge, as stored in the blocked-payers bucket. */
export const BlockedPayer = Type.Object({ reason: Type.String(), since: Type.Integer() })
export type BlockedPayer = Static<typeof BlockedPayer>
export const blockedPayerCodec = codec(BlockedPayer)

/** USDC base units (6 decimals) as dollars: 10000n -> "$0.01", 1234567n -> "$1.234567", 0n -> "$0.00". */
export function formatUsd(baseUnits: bigint): string {
  const negative = baseUnits < 0n
  const abs = negative ? -baseUnits : baseUnits
  const whole = abs / 1_000_000n
  let fraction = (abs % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '')
  if (fraction.length < 2) fraction = fraction.padEnd(2, '0')
  return `${negative ? '-' : ''}$${whole}.${fraction}`
}

/** The `description` of what a paid request buys, as offered in 402 answers and sent to facilitators. */
export const paidRequestDescription = 'Agent Trading Service: one agent request'
