import { serviceContract } from '../common/service.ts'
import { marketRoutes } from './http.ts'
import { marketChannels } from './nats.ts'

export * from './http.ts'
export * from './nats.ts'

export const marketContract = serviceContract({ name: 'market-data', routes: marketRoutes, channels: marketChannels })
