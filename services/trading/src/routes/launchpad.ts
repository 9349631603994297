import { tradingRoutes } from '@ats/contracts'
import { NotFound, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { Address } from 'viem'
import type { Launchpad } from '../launchpad/launchpad.ts'
import { keyOf, spendKeyOf } from './caller.ts'

export async function launchpadRoutes(app: FastifyInstance, { launchpad }: { launchpad: Launchpad }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...tradingRoutes.launch,
    handler: async (request, reply) => {
      const idempotencyKey = spendKeyOf(request, reply)
      const { result, replayed } = await launchpad.launch(request.body, request.identity.keyId, idempotencyKey)
      if (replayed) reply.header('idempotent-replayed', 'true')
      return reply.code(201).send({ ...result, idempotencyKey })
    },
  })

  api.route({
    ...tradingRoutes.launched,
    handler: async (request) => ({ tokens: await launchpad.list(keyOf(request), request.query.limit) }),
  })

  api.route({
    ...tradingRoutes.launchedToken,
    handler: async (request) => {
      const token = await launchpad.get(keyOf(request), request.params.address as Address)
      if (!token) throw new NotFound(`launched token ${request.params.address}`)
      return token
    },
  })
}
