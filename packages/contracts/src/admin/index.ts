import { serviceContract } from '../common/service.ts'
import { creditRoutes } from './credit.ts'
import { adminRoutes } from './http.ts'
import { adminChannels } from './nats.ts'
import { webhookRoutes } from './webhooks.ts'

export * from './apiKeys.ts'
export * from './credit.ts'
export * from './http.ts'
export * from './nats.ts'
export * from './payments.ts'
export * from './wallet.ts'
export * from './webhooks.ts'

export const adminContract = serviceContract({
  name: 'admin',
  routes: { ...adminRoutes, ...creditRoutes, ...webhookRoutes },
  channels: adminChannels,
})
