import { serviceContract } from '../common/service.ts'
import { automationRoutes } from './http.ts'
import { automationChannels } from './nats.ts'

export * from './http.ts'
export * from './nats.ts'

export const automationContract = serviceContract({ name: 'automation', routes: automationRoutes, channels: automationChannels })
