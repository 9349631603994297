import { createHash } from 'node:crypto'
import { Type, type Static } from 'typebox'
import { codec, topic } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { Address, Bytes32, IntegerString, Signature65 } from '../common/primitives.ts'

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
  /** the agent job this payment bought (POST /agent/prompt) */
  jobId: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  /**
   * when to settle: at once (absent), or only once the job's outcome says charge
   * (`on-job-complete`): the ledger holds it until then, and voids it if the job fails
   */
  settle: Type.Optional(Type.Literal('on-job-complete')),
})
export type PaymentCharged = Static<typeof PaymentCharged>

/** A payment held for a job is settled only once its job ends: `on-job-complete`. */
export const settleOnJobComplete = 'on-job-complete' as const

/**
 * What the agent decided for the payment of a paid job once the job ended: `charge` (it
 * completed, or was cancelled while running: work was done) or `void` (it failed, or was
 * cancelled before it started), with the reason. Published on the payments stream with the
 * job id as the message id; the ledger keeps the first outcome of a job.
 */
export const JobPaymentOutcome = Type.Object({
  jobId: Type.String({ minLength: 1, maxLength: 64 }),
  payer: Address(),
  nonce: Bytes32(),
  outcome: Type.Union([Type.Literal('charge'), Type.Literal('void')]),
  /** why it is voided (the job's error, or "cancelled before it started") */
  reason: Type.Optional(Type.String({ maxLength: 2000 })),
  /** the job's final status */
  status: Type.Union([Type.Literal('complete'), Type.Literal('failed'), Type.Literal('cancelled')]),
  at: Type.Integer({ description: 'when the job ended, ms since the Unix epoch' }),
})
export type JobPaymentOutcome = Static<typeof JobPaymentOutcome>

/** Where the payment of a paid job stands, as the job's owner sees it. */
export const JobPayment = Type.Object(
  {
    state: Type.Union([Type.Literal('pending'), Type.Literal('settled'), Type.Literal('voided'), Type.Literal('failed')], {
      description:
        'pending: authorized, settled once the job completes (or while it settles); settled: the USDC moved (txHash); voided: never settled, the job failed or was cancelled before it started (reason); failed: could not be settled (reason)',
    }),
    reason: Type.Optional(Type.String({ description: 'voided or failed: why' })),
    txHash: Type.Optional(Bytes32({ description: 'settled: the transfer' })),
  },
  { description: 'paid jobs (POST /agent/prompt): the payment of the job; absent when the ledger could not be asked' },
)
export type JobPayment = Static<typeof JobPayment>

/** admin.payments.of-jobs request: the jobs whose payments to look up. */
export const PaymentsOfJobsRequest = Type.Object({ jobIds: Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 100 }) })
export type PaymentsOfJobsRequest = Static<typeof PaymentsOfJobsRequest>

/** admin.payments.of-jobs reply: what the ledger knows of each job's payment (jobs it knows nothing of are left out). */
export const PaymentsOfJobsReply = Type.Object({ payments: Type.Record(Type.String(), JobPayment) })
export type PaymentsOfJobsReply = Static<typeof PaymentsOfJobsReply>

/**
 * One stream message: the payments a gateway charged while its previous publish was in
 * flight (one alone when traffic is light). Batching keeps JetStream's cost per paid
 * request small; the ledger's unique (payer, nonce) keeps every payment recorded once.
 */
export const PaymentsCharged = Type.Object({ charges: Type.Array(PaymentCharged, { minItems: 1 }) })
export type PaymentsCharged = Static<typeof PaymentsCharged>

const day = 86_400_000

/**
 * x402 payment events (gateway -> JetStream -> admin) and the shared list of blocked
 * payers, in the fleet's NATS namespace.
 */
export function paymentChannels(namespace: string) {
  /** JetStream stream holding charged payments */
  const stream = `${namespace}_payments`
  /** the subject gateways publish charged payments on, in batches */
  const charged = topic(subjectOf(namespace, 'payments', 'charged'), PaymentsCharged)
  /** the agent's verdict on the payment of each paid job (charge or void), one message per job */
  const jobOutcome = topic(subjectOf(namespace, 'payments', 'job-outcome'), JobPaymentOutcome)
  /** where charges that cannot be recorded go after bounded tries, with their reason (same stream) */
  const deadLetters = subjectOf(namespace, 'payments', 'dead-letter')
  return {
    stream,
    charged,
    jobOutcome,
    /** the KV bucket of payers refused at the edge (key: lower-case address) */
    blockedPayers: `${namespace}-blocked-payers`,
    /** the durable consumer through which admin records payments */
    ledgerConsumer: 'admin-ledger',
    /** the durable consumer through which admin records the outcomes of paid jobs */
    jobOutcomeConsumer: 'admin-job-outcomes',
    deadLetters,
    // kept a week, so an admin outage of days loses nothing; a republished batch within
    // 10 minutes is dropped by JetStream, anything else by the ledger's unique (payer, nonce)
    // (job outcomes: by their job id, the message id, and the ledger keeping a job's first outcome)
    streamSpec: {
      name: stream,
      subjects: [charged.subject, jobOutcome.subject, deadLetters],
      maxAgeMs: 7 * day,
      duplicateWindowMs: 600_000,
    },
  }
}
export type PaymentChannels = ReturnType<typeof paymentChannels>

/**
 * JetStream's de-duplication id of a batch: a batch published again (a retry) is stored once.
 * A SHA-256 over every payment of the batch (payer and nonce, in order), so only the same
 * batch is ever taken for a duplicate: an id made of the first payment and a count would let
 * another batch starting with that payment, with as many charges, be dropped with the other
 * payers' charges in it.
 */
export const paymentsMessageId = ({ charges }: PaymentsCharged) => {
  const hash = createHash('sha256')
  for (const { authorization: a } of charges) hash.update(`${a.from.toLowerCase()}:${a.nonce.toLowerCase()}\n`)
  return `charges:${hash.digest('hex')}`
}

/** Why a payer is refused at the edge, as stored in the blocked-payers bucket. */
export const BlockedPayer = Type.Object({ reason: Type.String(), since: Type.Integer() })
export type BlockedPayer = Static<typeof BlockedPayer>
export const blockedPayerCodec = codec(BlockedPayer)
