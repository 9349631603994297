export * from './subjects.ts'
export * from './identity.ts'
export * from './errors.ts'
export * from './messages.ts'
export * from './codec.ts'
export * from './apiKeys.ts'
export * from './payments.ts'
export * from './x402.ts'
export * from './api/route.ts'
export * from './api/routeTable.ts'
export * from './api/openapi.ts'
export * from './api/gateway.ts'
export * from './api/admin.ts'
export * from './api/agent.ts'

import { adminRoutes } from './api/admin.ts'
import { agentRoutes } from './api/agent.ts'
import { gatewayRoutes } from './api/gateway.ts'
import type { ApiRoute } from './api/route.ts'

/** Every public route; the gateway's OpenAPI document lists exactly these. */
export const publicRoutes: readonly ApiRoute[] = [
  ...Object.values(gatewayRoutes),
  ...Object.values(agentRoutes),
  ...Object.values(adminRoutes),
]

import { keyChannels } from './messages.ts'
import { paymentChannels } from './payments.ts'

/** Every NATS channel of one namespace (NATS_NAMESPACE). */
export function natsChannels(namespace: string) {
  return { ...keyChannels(namespace), payments: paymentChannels(namespace) }
}
export type NatsChannels = ReturnType<typeof natsChannels>
