import { serviceContract } from '../common/service.ts'
import { automationChannels, automationRoutes } from './nats.ts'

export * from './nats.ts'

export const automationContract = serviceContract({ name: 'automation', routes: automationRoutes, channels: automationChannels })
