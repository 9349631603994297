import { adminContract } from './admin/index.ts'
import { agentContract } from './agent/index.ts'
import { automationContract } from './automation/index.ts'
import type { ApiRoute } from './common/route.ts'
import { gatewayContract } from './gateway/index.ts'
import { marketContract } from './market/index.ts'
import { tradingContract } from './trading/index.ts'

export * from './common/errors.ts'
export * from './common/events.ts'
export * from './common/identity.ts'
export * from './common/messages.ts'
export * from './common/namespace.ts'
export * from './common/primitives.ts'
export * from './common/route.ts'
export * from './common/service.ts'
export * from './x402/requirements.ts'
export * from './gateway/index.ts'
export * from './admin/index.ts'
export * from './agent/index.ts'
export * from './trading/index.ts'
export * from './market/index.ts'
export * from './automation/index.ts'

/** Every service's contract, by name. Adding a service is its folder plus one line here. */
export const serviceContracts = {
  gateway: gatewayContract,
  admin: adminContract,
  agent: agentContract,
  trading: tradingContract,
  market: marketContract,
  automation: automationContract,
} as const

/** Every public route; the gateway's OpenAPI document lists exactly these. */
export const publicRoutes: readonly ApiRoute[] = Object.values(serviceContracts).flatMap((c) => Object.values<ApiRoute>(c.routes))

/** Every NATS channel of one namespace (NATS_NAMESPACE), by service: `channels.admin.keyVerify`. */
export type NatsChannels = { [S in keyof typeof serviceContracts]: ReturnType<(typeof serviceContracts)[S]['channels']> }

export function natsChannels(namespace: string): NatsChannels {
  return Object.fromEntries(Object.entries(serviceContracts).map(([name, c]) => [name, c.channels(namespace)])) as NatsChannels
}
