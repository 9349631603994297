import { randomBytes } from 'node:crypto'
import { approvalRoutes, isAwaitingApproval, tradingRoutes } from '@ats/contracts'
import { NotFound, idempotencyKeyOf, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Executor, Caller } from '../swaps/executor.ts'
import { quoteAnswer, type Quoter } from '../swaps/quotes.ts'
import type { createPreparer } from '../swaps/prepare.ts'

export const callerOf = (request: FastifyRequest): Caller => ({ keyId: request.identity.keyId, ownerId: request.identity.ownerId })

/**
 * The Idempotency-Key a spend runs under: the client's, or one generated for it, answered in the
 * idempotency-key header (on errors too: a 504 can be repeated with it) and the result's
 * `idempotencyKey`, so every execute and launch can be retried without spending twice.
 */
export function spendKeyOf(request: FastifyRequest, reply: FastifyReply): string {
  const key = idempotencyKeyOf(request.headers) ?? `gen_${randomBytes(18).toString('base64url')}`
  reply.header('idempotency-key', key)
  return key
}

/** The key the gateway authenticated; its routes are per key. */
export const keyOf = (request: FastifyRequest) => request.identity.keyId ?? '-'

export async function swapRoutes(
  app: FastifyInstance,
  {
    quoter,
    executor,
    prepare,
    impactCeilingBps,
  }: { quoter: Quoter; executor: Executor; prepare: ReturnType<typeof createPreparer>; impactCeilingBps: number },
) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({ ...tradingRoutes.quote, handler: async (request) => quoteAnswer(await quoter.quote(request.query), impactCeilingBps) })

  api.route({
    ...approvalRoutes.execute,
    handler: async (request, reply) => {
      const idempotencyKey = spendKeyOf(request, reply)
      const { result, replayed } = await executor.execute(request.body, callerOf(request), idempotencyKey, { via: 'http' })
      if (replayed) reply.header('idempotent-replayed', 'true')
      // held for a person's approval: nothing was sent
      if (isAwaitingApproval(result)) return reply.code(202).send({ ...result, idempotencyKey })
      return { ...result, idempotencyKey }
    },
  })

  api.route({ ...tradingRoutes.prepare, handler: async (request) => prepare(request.body) })

  api.route({
    ...tradingRoutes.executions,
    handler: async (request) => ({ executions: await executor.list(keyOf(request), request.query.limit) }),
  })

  api.route({
    ...tradingRoutes.execution,
    handler: async (request) => {
      const execution = await executor.get(keyOf(request), request.params.id)
      if (!execution) throw new NotFound(`execution ${request.params.id}`)
      return execution
    },
  })
}
