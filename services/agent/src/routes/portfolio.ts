import { agentRoutes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import { NoKey } from '../errors.ts'
import type { JobPaymentLookup } from '../jobs/paymentOutcomes.ts'
import { jobView, type JobStore } from '../jobs/store.ts'

const maxJobs = 100

/** GET /portfolio/jobs: the key's own jobs (/v1) and the paid jobs of the wallet bound to it. */
export async function portfolioRoutes(app: FastifyInstance, { store, paymentsOf }: { store: JobStore; paymentsOf: JobPaymentLookup }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...agentRoutes.portfolioJobs,
    handler: async (request) => {
      const { keyId, wallet } = request.identity
      if (!keyId) throw new NoKey()
      const jobs = await store.listForKey(keyId, wallet, Math.min(request.query.limit, maxJobs))
      // the paid jobs' payments in one request to admin
      const payments = await paymentsOf(jobs)
      return {
        jobs: jobs.map((job) => {
          const payment = payments.get(job.id)
          return { ...jobView(job, true), prompt: job.prompt, ...(payment ? { payment } : {}) }
        }),
      }
    },
  })
}
