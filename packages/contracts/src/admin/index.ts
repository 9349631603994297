import { serviceContract } from '../common/service.ts'
import { adminRoutes } from './http.ts'
import { adminChannels } from './nats.ts'

export * from './apiKeys.ts'
export * from './http.ts'
export * from './nats.ts'
export * from './payments.ts'
export * from './wallet.ts'

export const adminContract = serviceContract({ name: 'admin', routes: adminRoutes, channels: adminChannels })
