import { adminRoutes } from '@ats/contracts'
import { NotFound, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { AgentPayers } from '../agentPayers/agentPayers.ts'

/** The agent's allowlist of payers it executes swaps for from the server wallet. */
export async function agentPayersRoutes(app: FastifyInstance, { payers }: { payers: AgentPayers }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...adminRoutes.putAgentPayer,
    handler: async (request) => {
      const entry = await payers.put(request.params.address, request.body.policy, request.body.label)
      request.log.info({ payer: entry.address, policy: entry.policy, by: request.identity.keyId }, 'agent payer allowed')
      return entry
    },
  })

  api.route({ ...adminRoutes.listAgentPayers, handler: async () => ({ payers: await payers.list() }) })

  api.route({
    ...adminRoutes.deleteAgentPayer,
    handler: async (request) => {
      if (!(await payers.remove(request.params.address))) throw new NotFound(`agent payer ${request.params.address}`)
      request.log.info({ payer: request.params.address, by: request.identity.keyId }, 'agent payer removed')
      return { ok: true as const, address: request.params.address }
    },
  })
}
