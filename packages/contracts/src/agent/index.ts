import { serviceContract } from '../common/service.ts'
import { chatRoutes } from './chat.ts'
import { agentRoutes } from './http.ts'
import { agentChannels } from './nats.ts'

export * from './chat.ts'
export * from './http.ts'
export * from './nats.ts'

export const agentContract = serviceContract({ name: 'agent', routes: { ...agentRoutes, ...chatRoutes }, channels: agentChannels })
