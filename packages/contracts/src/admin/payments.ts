import { Type, type Static } from 'typebox'
import { codec, topic, type Topic } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { Address, Bytes32, IntegerString, Signature65 } from '../common/primitives.ts'

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
  /** where charges that cannot be recorded go after bounded tries, with their reason (same stream) */
  deadLetters: string
  /** the stream's configuration, ensured by every publisher and consumer at start */
  streamSpec: { name: string; subjects: string[]; maxAgeMs: number; duplicateWindowMs: number }
}

/**
 * One charged payment: enough to record, report and settle it (on chain or through a
 * facilitator). What it earns is `authorization.value`: EIP-3009 moves the whole value.
 */
export const PaymentCharged = Type.Object({
  payer: Address(),
  payTo: Address(),
  asset: Address(),
  chainId: Type.Integer(),
  /** the network the client named: a v1 short name or a CAIP-2 id */
  network: Type.String(),
  x402Version: Type.Union([Type.Literal(1), Type.Literal(2)]),
  authorization: Type.Object({
    from: Address(),
    to: Address(),
    value: IntegerString(),
    validAfter: IntegerString(),
    validBefore: IntegerString(),
    nonce: Bytes32(),
  }),
  signature: Signature65(),
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

const day = 86_400_000

export function paymentChannels(namespace: string): PaymentChannels {
  const stream = `${namespace}_payments`
  const charged = topic(subjectOf(namespace, 'payments', 'charged'), PaymentsCharged)
  return {
    stream,
    charged,
    blockedPayers: `${namespace}-blocked-payers`,
    ledgerConsumer: 'admin-ledger',
    deadLetters: subjectOf(namespace, 'payments', 'dead-letter'),
    // kept a week, so an admin outage of days loses nothing; a republished batch within
    // 10 minutes is dropped by JetStream, anything else by the ledger's unique (payer, nonce)
    streamSpec: { name: stream, subjects: [charged.subject, subjectOf(namespace, 'payments', 'dead-letter')], maxAgeMs: 7 * day, duplicateWindowMs: 600_000 },
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
