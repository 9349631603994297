import { gatewayRoutes, publicRoutes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import { buildOpenApi } from '../routing/openapi.ts'

export interface RootOptions {
  name: string
  version: string
  chain: string
  chainId: number
}

export async function rootRoutes(app: FastifyInstance, options: RootOptions) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  const document = buildOpenApi(
    {
      title: 'Agent Trading Service API',
      version: options.version,
      description: 'AI-agent DeFi on Arbitrum: agent jobs, swaps, portfolio, market data, automations, administration.',
    },
    publicRoutes,
  )
  api.route({
    ...gatewayRoutes.root,
    handler: async () => ({
      name: options.name,
      version: options.version,
      chain: options.chain,
      chainId: options.chainId,
      docs: gatewayRoutes.openapi.url,
    }),
  })
  api.route({ ...gatewayRoutes.openapi, handler: async () => document })
}
