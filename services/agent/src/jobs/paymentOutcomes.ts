// The outcome of each paid job's payment (charge or void) for admin's ledger, published to the
// payments stream. The outcome is written with the job's final status (one UPDATE); publishing
// comes after the commit, and a sweep publishes what a dead process left unpublished, so no
// outcome is lost. The job id is JetStream's message id and admin keeps a job's first outcome,
// so a repeat is harmless.
import type { Endpoint, JobPayment, JobPaymentOutcome, PaymentChannels, PaymentsOfJobsReply, PaymentsOfJobsRequest } from '@ats/contracts'
import { callEndpoint, ensureStream, publishTraced, startOutbox } from '@ats/service-kit'
import type { EndpointDeps } from './approvals.ts'
import type { StorePublisherDeps } from './queue.ts'
import type { PaymentOutcomeRow } from './store.ts'

/** The outcome message of a finished paid job. */
export function outcomeMessage(row: PaymentOutcomeRow): JobPaymentOutcome {
  const [payer, nonce] = row.payment.split(':') as [string, string]
  return {
    jobId: row.id,
    payer,
    nonce,
    outcome: row.paymentOutcome,
    ...(row.paymentOutcome === 'void' ? { reason: row.paymentReason ?? 'the job did not complete' } : {}),
    status: row.status,
    at: row.updatedAt.getTime(),
  }
}

export async function startPaymentOutcomes({ nc, channels, store, log }: StorePublisherDeps<PaymentChannels>) {
  await ensureStream(nc, channels.streamSpec)
  const js = nc.jetstream()

  const outbox = startOutbox({
    name: 'payment-outcomes',
    log,
    publish: async (jobId) => {
      const row = await store.paymentOutcome(jobId)
      if (!row) return
      const message = outcomeMessage(row)
      await publishTraced(js, channels.jobOutcome.subject, channels.jobOutcome.message.encode(message), { msgID: jobId, timeout: 5_000 })
      await store.markOutcomePublished(jobId)
      log.info({ jobId, outcome: message.outcome, reason: message.reason }, 'job payment outcome published')
    },
    unpublished: async (olderThan, limit) => (await store.unpublishedOutcomes(olderThan, limit)).map((job) => job.id),
  })

  return {
    /** after a paid job's final status is committed (the store's hook); never throws */
    published: (jobId: string) => void outbox.send(jobId),
    stop: outbox.stop,
  }
}
export type PaymentOutcomes = Awaited<ReturnType<typeof startPaymentOutcomes>>

/**
 * The payments of paid jobs, from admin's ledger in one NATS request: a paid job the ledger does
 * not know yet (its charge is on its way) is pending. When admin does not answer, the jobs are
 * answered without `payment` rather than with a guess.
 */
export function createJobPaymentLookup({
  nc,
  endpoint,
  log,
  timeoutMs = 2_000,
}: EndpointDeps<Endpoint<PaymentsOfJobsRequest, PaymentsOfJobsReply>>) {
  return async function paymentsOf(jobs: Array<{ id: string; payment: string | null }>): Promise<Map<string, JobPayment>> {
    const paid = jobs.filter((j) => j.payment !== null).map((j) => j.id)
    if (paid.length === 0) return new Map()
    try {
      const { payments } = await callEndpoint(nc, endpoint, { jobIds: paid }, { timeoutMs })
      return new Map(paid.map((id) => [id, payments[id] ?? { state: 'pending' as const }]))
    } catch (error) {
      log.warn({ err: error, jobs: paid.length }, 'payments of jobs not available from admin; answered without them')
      return new Map()
    }
  }
}
export type JobPaymentLookup = ReturnType<typeof createJobPaymentLookup>
