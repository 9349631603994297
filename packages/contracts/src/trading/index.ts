import { serviceContract } from '../common/service.ts'
import { tradingRoutes } from './http.ts'
import { tradingChannels } from './nats.ts'

export * from './http.ts'
export * from './nats.ts'

export const tradingContract = serviceContract({ name: 'trading', routes: tradingRoutes, channels: tradingChannels })
