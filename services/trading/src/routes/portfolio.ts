import { tradingRoutes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { createPositions } from '../positions/positions.ts'

export async function portfolioRoutes(app: FastifyInstance, { positions }: { positions: ReturnType<typeof createPositions> }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  api.route({ ...tradingRoutes.positions, handler: async (request) => positions(request.query.address) })
}
