import { serviceContract } from '../common/service.ts'
import { approvalRoutes } from './approvals.ts'
import { grantRoutes } from './grants.ts'
import { tradingRoutes } from './http.ts'
import { tradingChannels } from './nats.ts'

export * from './approvals.ts'
export * from './grants.ts'
export * from './http.ts'
export * from './nats.ts'
export * from './swaps.ts'
export * from './tokenList.ts'

export const tradingContract = serviceContract({
  name: 'trading',
  routes: { ...tradingRoutes, ...approvalRoutes, ...grantRoutes },
  channels: tradingChannels,
})
