import { agentRoutes } from '@ats/contracts'
import { NotFound, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { isAddress } from 'viem'
import { ContextTooLarge, JobNotCancellable, NoPayer, PromptNotText } from '../errors.ts'
import type { JobEvents } from '../jobs/events.ts'
import type { JobQueue } from '../jobs/queue.ts'
import { isFinished, jobView, type JobStore, type Owner } from '../jobs/store.ts'

const maxContextBytes = 16_384

/** The owner of paid routes: the payer the gateway verified, as a lower-case address. */
export function payerOf(request: FastifyRequest): Owner {
  const payer = request.identity.ownerId
  if (!payer || !isAddress(payer, { strict: false })) throw new NoPayer()
  const address = payer.toLowerCase()
  return { ownerId: address, wallet: address }
}

export interface AgentRouteDeps {
  store: JobStore
  queue: JobQueue
  events: JobEvents
  /** broadcast that a job was cancelled, for the worker running it */
  cancelled(jobId: string): void
}

/** Jobs and threads of the payer: POST /agent/prompt, the job, its events, its cancel, the thread. */
export async function agentRoutesPlugin(app: FastifyInstance, { store, queue, events, cancelled }: AgentRouteDeps) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...agentRoutes.prompt,
    // the kit's validator coerces scalars (query strings need it); a prompt must arrive as text
    preValidation: async (request) => {
      const body = request.body as { prompt?: unknown } | undefined
      if (body && typeof body === 'object' && 'prompt' in body && typeof body.prompt !== 'string') throw new PromptNotText()
    },
    handler: async (request, reply) => {
      const owner = payerOf(request)
      const { prompt, threadId, context } = request.body
      if (context !== undefined && Buffer.byteLength(JSON.stringify(context)) > maxContextBytes) throw new ContextTooLarge(maxContextBytes)
      const created = await store.createPrompt(owner, { prompt, threadId, context })
      events.emit(created.event)
      await queue.enqueue(created.jobId)
      request.log.info({ jobId: created.jobId, threadId: created.threadId }, 'job accepted')
      return reply.code(202).send({ jobId: created.jobId, threadId: created.threadId, status: 'pending' as const })
    },
  })

  api.route({
    ...agentRoutes.job,
    handler: async (request) => {
      const job = await store.getJob(payerOf(request), request.params.id)
      if (!job) throw new NotFound(`job ${request.params.id}`)
      return jobView(job)
    },
  })

  api.route({
    ...agentRoutes.cancelJob,
    handler: async (request) => {
      const event = await store.cancel(payerOf(request), request.params.id)
      if (!event) throw new JobNotCancellable(request.params.id)
      events.emit(event)
      cancelled(request.params.id)
      request.log.info({ jobId: request.params.id }, 'job cancelled')
      return { success: true as const, jobId: request.params.id }
    },
  })

  api.route({
    ...agentRoutes.jobEvents,
    handler: async (request, reply) => {
      const job = await store.getJob(payerOf(request), request.params.id)
      if (!job) throw new NotFound(`job ${request.params.id}`)
      events.stream(reply, job.id, Number(request.headers['last-event-id'] ?? 0), isFinished(job.status))
      return reply
    },
  })

  api.route({
    ...agentRoutes.thread,
    handler: async (request) => {
      const thread = await store.thread(payerOf(request), request.params.id)
      if (!thread) throw new NotFound(`thread ${request.params.id}`)
      return thread
    },
  })
}
