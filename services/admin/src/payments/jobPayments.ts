// Payments of agent jobs: held until the agent says how the job ended, then due for settlement
// (charge) or voided (the job failed, or was cancelled before it started).
import type { JobPayment, JobPaymentOutcome, PaymentChannels } from '@ats/contracts'
import { recordEvent, startDurableConsumer, startWorkerLoop, type EventOutbox, type Logger, type WorkerLoop } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { Payment, PrismaClient, SettlementState } from '../generated/prisma/client.ts'
import { eventColumns, paymentEventData, type PaymentCounter } from './ledger.ts'

/** A ledger state as the job's owner sees it: held, pending, settling (and skipped) are all pending. */
const shown: Record<SettlementState, JobPayment['state']> = {
  held: 'pending',
  pending: 'pending',
  settling: 'pending',
  skipped: 'pending',
  settled: 'settled',
  voided: 'voided',
  failed: 'failed',
}

/** A payment moved by applyOutcomes, with what its payment.voided event says. */
type Moved = Pick<Payment, 'payer' | 'nonce' | 'amount' | 'asset' | 'network' | 'chainId' | 'jobId' | 'route' | 'state' | 'voidReason'>

export function createJobPayments(
  db: PrismaClient,
  { settle, events, counted }: { settle: boolean; events: Pick<EventOutbox, 'send'>; counted: PaymentCounter },
) {
  return {
    /** Keeps each job's first outcome; a repeat (a redelivery, a republish) changes nothing. */
    async recordOutcomes(outcomes: JobPaymentOutcome[]): Promise<number> {
      if (outcomes.length === 0) return 0
      const column = <T>(f: (o: JobPaymentOutcome) => T) => outcomes.map(f)
      return db.$executeRaw`
        INSERT INTO job_outcomes (job_id, payer, nonce, outcome, status, reason, ended_at)
        SELECT * FROM unnest(${column((o) => o.jobId)}::text[], ${column((o) => o.payer.toLowerCase())}::text[],
          ${column((o) => o.nonce.toLowerCase())}::text[], ${column((o) => o.outcome)}::text[], ${column((o) => o.status)}::text[],
          ${column((o) => o.reason ?? null)}::text[], ${column((o) => new Date(o.at).toISOString())}::timestamptz[])
        ON CONFLICT (job_id) DO NOTHING`
    },

    /**
     * Moves held payments whose job's outcome is known: charge -> pending (the settler takes it;
     * skipped when settlement is off), void -> voided with the reason. One statement over both
     * tables, run again every round: whichever of the payment and the outcome is stored first,
     * the round after both are committed applies it (no race between two transactions that
     * cannot see each other). Then held payments whose authorization has expired are voided:
     * the job outlived the payment's window, so it can no longer be settled.
     */
    async applyOutcomes(): Promise<{ charged: number; voided: number; expired: number }> {
      const due: SettlementState = settle ? 'pending' : 'skipped'
      // each voided payment's payment.voided event is recorded in the transaction that voids it
      const { moved, expired, eventIds } = await db.$transaction(async (tx) => {
        const moved = await tx.$queryRaw<Moved[]>`
          UPDATE payments p
          SET state = (CASE WHEN o.outcome = 'charge' THEN ${due} ELSE 'voided' END)::"SettlementState",
            void_reason = CASE WHEN o.outcome = 'charge' THEN NULL ELSE coalesce(o.reason, 'the job did not complete') END,
            next_attempt_at = now()
          FROM job_outcomes o
          WHERE p.state = 'held' AND p.job_id = o.job_id
          RETURNING ${eventColumns}, p.state, p.void_reason AS "voidReason"`
        const expired = await tx.$queryRaw<Moved[]>`
          UPDATE payments p SET state = 'voided', void_reason = 'authorization expired before the job finished'
          WHERE p.state = 'held' AND p.valid_before <= floor(extract(epoch FROM now()))::bigint
          RETURNING ${eventColumns}, p.state, p.void_reason AS "voidReason"`
        const eventIds: string[] = []
        for (const p of [...moved, ...expired].filter((m) => m.state === 'voided')) {
          eventIds.push(
            await recordEvent(tx, {
              type: 'payment.voided',
              owner: { wallet: p.payer },
              data: { ...paymentEventData(p), reason: p.voidReason ?? 'voided' },
            }),
          )
        }
        return { moved, expired: expired.length, eventIds }
      })
      events.send(...eventIds)
      const voided = moved.filter((m) => m.state === 'voided').length
      counted.inc({ state: 'voided' }, voided + expired)
      return { charged: moved.length - voided, voided, expired }
    },

    /**
     * The payments of these jobs as their owner sees them. A job whose payment is not recorded yet
     * but whose outcome is a void is voided already; a job the ledger knows nothing of is left out.
     */
    async ofJobs(jobIds: string[]): Promise<Record<string, JobPayment>> {
      if (jobIds.length === 0) return {}
      const [payments, outcomes] = await Promise.all([
        db.payment.findMany({
          where: { jobId: { in: jobIds } },
          select: { jobId: true, state: true, txHash: true, voidReason: true, settleError: true },
        }),
        db.jobOutcome.findMany({ where: { jobId: { in: jobIds }, outcome: 'void' }, select: { jobId: true, reason: true } }),
      ])
      const out: Record<string, JobPayment> = {}
      for (const o of outcomes) out[o.jobId] = { state: 'voided', reason: o.reason ?? 'the job did not complete' }
      for (const p of payments) {
        const state = shown[p.state]
        // a held payment whose void is recorded but not yet applied is voided already
        if (state === 'pending' && out[p.jobId!]) continue
        out[p.jobId!] = {
          state,
          ...(state === 'voided' && p.voidReason ? { reason: p.voidReason } : {}),
          ...(state === 'failed' && p.settleError ? { reason: p.settleError } : {}),
          ...(state === 'settled' && p.txHash ? { txHash: p.txHash } : {}),
        }
      }
      return out
    },
  }
}
export type JobPayments = ReturnType<typeof createJobPayments>

/**
 * Records the agent's job outcomes from the payments stream and applies them to held payments
 * every `intervalMs`, whether settlement is on or not.
 */
export async function startJobOutcomes(
  nc: NatsConnection,
  channels: PaymentChannels,
  jobPayments: JobPayments,
  log: Logger,
  intervalMs: number,
) {
  let applier: WorkerLoop | undefined
  const consumer = await startDurableConsumer({
    nc,
    log,
    stream: channels.streamSpec,
    durable: channels.jobOutcomeConsumer,
    topic: channels.jobOutcome,
    deadLetterSubject: channels.deadLetters,
    maxDeliveries: 3,
    handle: async (batch) => {
      const recorded = await jobPayments.recordOutcomes(batch.map((d) => d.message))
      if (recorded > 0) log.info({ recorded, received: batch.length }, 'job outcomes recorded')
      // applied in the next round, which need not wait for the pause
      if (recorded > 0) applier?.wake()
    },
  })
  applier = startWorkerLoop({
    name: 'job-payments',
    log,
    idleMs: intervalMs,
    round: async () => {
      const { charged, voided, expired } = await jobPayments.applyOutcomes()
      if (charged + voided + expired > 0) log.info({ charged, voided, expired }, 'held job payments decided')
      return false
    },
  })
  return {
    async stop() {
      await Promise.all([consumer.stop(), applier?.stop()])
    },
  }
}
