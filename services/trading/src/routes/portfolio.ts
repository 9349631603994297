import { tradingRoutes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { Address } from 'viem'
import type { createPositions } from '../positions/positions.ts'

export async function portfolioRoutes(app: FastifyInstance, { positions, wallet }: { positions: ReturnType<typeof createPositions>; wallet: () => Address }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  api.route({ ...tradingRoutes.positions, handler: async (request) => positions((request.query.address as Address | undefined) ?? wallet()) })
}
