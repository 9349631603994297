import { agentRoutes as routes, identityHeaders, jobIdHeader } from '@ats/contracts'
import { fingerprintOf, NotFound, type IdempotencyStore, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { isAddress } from 'viem'
import type { Answers } from '../answers/answers.ts'
import { creditWalletOf, headerOf } from '../credit/hold.ts'
import { ContextTooLarge, JobNotCancellable, NoKey, NoPayer, PromptNotText } from '../errors.ts'
import type { JobEvents } from '../jobs/events.ts'
import { deadlineOf, validBeforeOf } from '../jobs/paymentDeadline.ts'
import type { JobPaymentLookup } from '../jobs/paymentOutcomes.ts'
import { isFinished, jobView, type Owner } from '../jobs/store.ts'

const maxContextBytes = 16_384
const maxPortfolioJobs = 100

/** The owner of paid routes: the payer the gateway verified (or whose credit pays), as a lower-case address. */
export function payerOf(request: FastifyRequest): Owner {
  const payer = request.identity.ownerId ?? creditWalletOf(request)
  if (!payer || !isAddress(payer, { strict: false })) throw new NoPayer()
  const address = payer.toLowerCase()
  return { ownerId: address, wallet: address }
}

export interface AgentRouteDeps {
  /** creates, queues and cancels jobs, as for /v1 */
  answers: Answers
  events: JobEvents
  /** runs a paid request sent again with its payment id once (the gateway's x-ats-idempotency-key) */
  idempotency: IdempotencyStore
  /** the payments of paid jobs, from admin's ledger */
  paymentsOf: JobPaymentLookup
  /** a paid job ends this long before its payment's validBefore (AGENT_JOB_PAYMENT_MARGIN_SECONDS) */
  paymentMarginSeconds: number
}

const paymentPattern = /^0x[0-9a-f]{40}:0x[0-9a-f]{64}$/

/**
 * The verified payment the gateway forwards with a paid request (`<payer>:<nonce>`), when it is
 * the owner's, with its validBefore: the job it starts is tied to it, its payment settles only if
 * the job completes, and the job must end while the payment can still be settled.
 */
function paymentOf(request: FastifyRequest, owner: Owner): { payment: string; validBefore: number | null } | undefined {
  const value = headerOf(request, identityHeaders.payment)
  if (value === undefined) return undefined
  if (!paymentPattern.test(value) || !value.startsWith(`${owner.ownerId}:`)) {
    request.log.warn("x-ats-payment is malformed or not the payer's; the job is not tied to a payment")
    return undefined
  }
  const validBefore = validBeforeOf(request.headers[identityHeaders.paymentValidBefore])
  if (validBefore === undefined) request.log.warn('x-ats-payment-valid-before is malformed; the job has no payment deadline')
  return { payment: value, validBefore: validBefore ?? null }
}

/**
 * Jobs and threads of the payer: POST /agent/prompt, the job, its events, its cancel, the thread;
 * and GET /portfolio/jobs: the key's own jobs (/v1) and the paid jobs of the wallet bound to it.
 */
export async function agentRoutes(
  app: FastifyInstance,
  { answers, events, idempotency, paymentsOf, paymentMarginSeconds }: AgentRouteDeps,
) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  const { store } = answers

  // A paid request sent again with its payment id (the gateway checked it is the same request)
  // gets the first one's result, across replicas and restarts: one job for one payment.
  const once = async <T>(request: FastifyRequest, scope: string, input: unknown, effect: () => Promise<T>): Promise<T> => {
    const key = request.identity.idempotencyKey
    if (key === undefined) return effect()
    return (await idempotency.run(scope, key, fingerprintOf(input), effect)).result
  }

  const jobOf = async (owner: Owner, id: string) => {
    const job = await store.getJob(owner, id)
    if (!job) throw new NotFound(`job ${id}`)
    return job
  }

  api.route({
    ...routes.prompt,
    // the kit's validator coerces scalars (query strings need it); a prompt must arrive as text
    preValidation: async (request) => {
      const body = request.body as { prompt?: unknown } | undefined
      if (body && typeof body === 'object' && 'prompt' in body && typeof body.prompt !== 'string') throw new PromptNotText()
    },
    handler: async (request, reply) => {
      const owner = payerOf(request)
      const { prompt, threadId, context } = request.body
      if (context !== undefined && Buffer.byteLength(JSON.stringify(context)) > maxContextBytes) throw new ContextTooLarge(maxContextBytes)
      const paid = paymentOf(request, owner)
      const job = await once(request, 'agent.prompt', { prompt, threadId, context }, async () => {
        const input = { prompt, threadId, context, payment: paid?.payment, paymentValidBefore: paid?.validBefore }
        const { jobId, threadId: thread } = await answers.start(reply, owner, input, false)
        request.log.info({ jobId, threadId: thread }, 'job accepted')
        return { jobId, threadId: thread }
      })
      reply.header(jobIdHeader, job.jobId)
      const deadline = deadlineOf(paid?.validBefore, paymentMarginSeconds)
      return reply
        .code(202)
        .send({ jobId: job.jobId, threadId: job.threadId, status: 'pending' as const, ...(deadline === undefined ? {} : { deadline }) })
    },
  })

  api.route({
    ...routes.job,
    handler: async (request) => {
      const job = await jobOf(payerOf(request), request.params.id)
      const payment = (await paymentsOf([job])).get(job.id)
      return { ...jobView(job), ...(payment ? { payment } : {}) }
    },
  })

  api.route({
    ...routes.cancelJob,
    handler: async (request) =>
      once(request, 'agent.cancel', { id: request.params.id }, async () => {
        if (!(await answers.cancel(payerOf(request), request.params.id))) throw new JobNotCancellable(request.params.id)
        request.log.info({ jobId: request.params.id }, 'job cancelled')
        return { success: true as const, jobId: request.params.id }
      }),
  })

  api.route({
    ...routes.jobEvents,
    handler: async (request, reply) => {
      const owner = payerOf(request)
      const job = await jobOf(owner, request.params.id)
      events.stream(reply, job.id, Number(request.headers['last-event-id'] ?? 0), isFinished(job.status), owner.ownerId)
      return reply
    },
  })

  api.route({
    ...routes.thread,
    handler: async (request) => {
      const thread = await store.thread(payerOf(request), request.params.id)
      if (!thread) throw new NotFound(`thread ${request.params.id}`)
      return thread
    },
  })

  api.route({
    ...routes.portfolioJobs,
    handler: async (request) => {
      const { keyId, wallet } = request.identity
      if (!keyId) throw new NoKey()
      const jobs = await store.listForKey(keyId, wallet, Math.min(request.query.limit, maxPortfolioJobs))
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
