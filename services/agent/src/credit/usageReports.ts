// What metered work paid by credit used, reported to admin's ledger on the credit stream
// (CreditUsage): the ledger keeps that much of the hold and gives the rest back. A job's report goes
// as a payment's outcome does (jobs/paymentOutcomes.ts), with the hold id as the message id. A
// credit-paid request that started no job (refused before any work) reports 0 at once.
import type { CreditUsage, creditChannels } from '@ats/contracts'
import { ensureStream, publishTraced, startOutbox } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { StorePublisherDeps } from '../jobs/queue.ts'
import { creditHoldOf, type CreditHold } from './hold.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** set once the request's credit hold is tied to a job, whose end reports it */
    creditHoldTaken?: boolean
  }
}

/**
 * How long a job cancelled while it ran waits for its worker to count what it did; then (the
 * worker died, or the job's lease had already lapsed) nothing is kept of its hold.
 */
export const uncountedAfterMs = 120_000

export async function startCreditUsage({ nc, channels, store, log }: StorePublisherDeps<ReturnType<typeof creditChannels>>) {
  await ensureStream(nc, channels.streamSpec)
  const js = nc.jetstream()
  const publish = (report: CreditUsage) =>
    publishTraced(js, channels.usage.subject, channels.usage.message.encode(report), { msgID: report.hold, timeout: 5_000 })

  const outbox = startOutbox({
    name: 'credit-usage',
    log,
    publish: async (jobId) => {
      const report = (await store.creditReport(jobId)) ?? (await store.creditUncounted(jobId, new Date(Date.now() - uncountedAfterMs)))
      if (!report) return
      await publish(report)
      await store.markCreditPublished(jobId)
      log.info({ jobId, hold: report.hold, amount: report.amount, outcome: report.outcome }, 'credit usage published')
    },
    unpublished: (olderThan, limit) => store.unpublishedCredit(olderThan, new Date(Date.now() - uncountedAfterMs), limit),
  })

  /** A hold that paid for no work: all of it comes back. */
  async function giveBack(hold: Pick<CreditHold, 'hold' | 'wallet'>, reason: string) {
    try {
      await publish({
        hold: hold.hold,
        wallet: hold.wallet,
        amount: '0',
        usage: { inputTokens: 0, outputTokens: 0 },
        outcome: 'failed',
        reason,
        at: Date.now(),
      })
      log.info({ hold: hold.hold }, 'credit hold given back: no work was done for it')
    } catch (error) {
      log.error({ err: error, hold: hold.hold }, 'credit hold not given back: the report was not published')
    }
  }

  return {
    /** after a credit-paid job's final status (or its count) is committed (the store's hook); never throws */
    published: (jobId: string) => void outbox.send(jobId),
    /**
     * Reports 0 for a request whose hold no job took (answered before any work, with an error or
     * not): registered on the scopes whose routes may carry a hold.
     */
    install(app: FastifyInstance) {
      app.decorateRequest('creditHoldTaken', false)
      app.addHook('onResponse', async (request, reply) => {
        if (request.creditHoldTaken) return
        let hold: CreditHold | undefined
        try {
          hold = creditHoldOf(request)
        } catch {
          return // unreadable: there is no wallet or id to report for
        }
        if (hold) await giveBack(hold, `no work was done: the request was answered ${reply.statusCode}`)
      })
    },
    stop: outbox.stop,
  }
}
export type CreditUsageReports = Awaited<ReturnType<typeof startCreditUsage>>
