import { serviceContract } from '../common/service.ts'
import { gatewayRoutes } from './http.ts'

export * from './http.ts'

export const gatewayContract = serviceContract({ name: 'gateway', routes: gatewayRoutes, channels: () => ({}) })
