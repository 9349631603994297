import { serviceContract } from '../common/service.ts'
import { chatRoutes } from './chat.ts'
import { agentRoutes } from './http.ts'
import { messagesRoutes } from './messages.ts'
import { agentChannels } from './nats.ts'
import { responsesRoutes } from './responses.ts'

export * from './chat.ts'
export * from './http.ts'
export * from './messages.ts'
export * from './nats.ts'
export * from './responses.ts'

export const agentContract = serviceContract({
  name: 'agent',
  routes: { ...agentRoutes, ...chatRoutes, ...messagesRoutes, ...responsesRoutes },
  channels: agentChannels,
})
