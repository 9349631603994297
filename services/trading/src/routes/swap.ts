import { tradingRoutes } from '@ats/contracts'
import { NotFound, idempotencyKeyOf, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Executor, Caller } from '../swaps/executor.ts'
import { quoteAnswer, type Quoter } from '../swaps/quotes.ts'
import type { createPreparer } from '../swaps/prepare.ts'

export const callerOf = (request: FastifyRequest): Caller => ({ keyId: request.identity.keyId, ownerId: request.identity.ownerId })

/** The key the gateway authenticated; its routes are per key. */
export const keyOf = (request: FastifyRequest) => request.identity.keyId ?? '-'

export async function swapRoutes(
  app: FastifyInstance,
  { quoter, executor, prepare, impactCeilingBps }: { quoter: Quoter; executor: Executor; prepare: ReturnType<typeof createPreparer>; impactCeilingBps: number },
) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({ ...tradingRoutes.quote, handler: async (request) => quoteAnswer(await quoter.quote(request.query), impactCeilingBps) })

  api.route({
    ...tradingRoutes.execute,
    handler: async (request, reply) => {
      const { result, replayed } = await executor.execute(request.body, callerOf(request), idempotencyKeyOf(request.headers))
      if (replayed) reply.header('idempotent-replayed', 'true')
      return result
    },
  })

  api.route({ ...tradingRoutes.prepare, handler: async (request) => prepare(request.body) })

  api.route({ ...tradingRoutes.executions, handler: async (request) => ({ executions: await executor.list(keyOf(request), request.query.limit) }) })

  api.route({
    ...tradingRoutes.execution,
    handler: async (request) => {
      const execution = await executor.get(keyOf(request), request.params.id)
      if (!execution) throw new NotFound(`execution ${request.params.id}`)
      return execution
    },
  })
}
