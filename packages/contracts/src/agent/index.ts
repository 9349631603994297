import { serviceContract } from '../common/service.ts'
import { agentRoutes } from './http.ts'

export * from './http.ts'

export const agentContract = serviceContract({ name: 'agent', routes: agentRoutes, channels: () => ({}) })
