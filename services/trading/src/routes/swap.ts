// The /swap routes: quotes, execute (or its hold for approval), prepare, and the key's executions.
import { isAwaitingApproval, tradingRoutes } from '@ats/contracts'
import { NotFound, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { ExecutionStore } from '../swaps/executions.ts'
import type { Executor } from '../swaps/executor.ts'
import { quoteAnswer, type Quoter } from '../swaps/quotes.ts'
import type { Preparer } from '../swaps/prepare.ts'
import { callerOf, keyOf, spendKeyOf } from './caller.ts'

export async function swapRoutes(
  app: FastifyInstance,
  {
    quoter,
    executor,
    executions,
    prepare,
    impactCeilingBps,
  }: { quoter: Quoter; executor: Executor; executions: ExecutionStore; prepare: Preparer; impactCeilingBps: number },
) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({ ...tradingRoutes.quote, handler: async (request) => quoteAnswer(await quoter.quote(request.query), impactCeilingBps) })

  api.route({
    ...tradingRoutes.execute,
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
    handler: async (request) => ({ executions: await executions.list(keyOf(request), request.query.limit) }),
  })

  api.route({
    ...tradingRoutes.execution,
    handler: async (request) => {
      const execution = await executions.get(keyOf(request), request.params.id)
      if (!execution) throw new NotFound(`execution ${request.params.id}`)
      return execution
    },
  })
}
