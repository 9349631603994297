// The public routes of market-data: each is its contract (validation, types, OpenAPI) and one call of the market.
import { marketRoutes as routes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { Address } from 'viem'
import type { Market } from '../market.ts'

export async function marketRoutes(app: FastifyInstance, { market }: { market: Market }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  api.route({ ...routes.prices, handler: () => market.prices() })
  api.route({ ...routes.trending, handler: () => market.trending() })
  api.route({
    ...routes.nfts,
    handler: (request) =>
      market.nfts(request.params.address as Address, { includeHidden: request.query.includeHidden, pageKey: request.query.pageKey }),
  })
  api.route({ ...routes.topPredictions, handler: (request) => market.topPredictions(request.query.limit) })
  api.route({ ...routes.searchPredictions, handler: (request) => market.searchPredictions(request.query.q, request.query.limit) })
  api.route({ ...routes.prediction, handler: (request) => market.prediction(request.params.conditionId) })
  api.route({ ...routes.bridgeQuote, handler: (request) => market.bridgeQuote(request.query) })
  api.route({ ...routes.bridgeChains, handler: () => market.bridgeChains() })
}
