import type { ServiceName } from '@ats/contracts'
import type { ServiceDefinition } from '@ats/service-kit'
import { watchBlockedPayers } from './plugins/blockedPayers.ts'
import { createChargePublisher } from './plugins/chargePublisher.ts'
import { createKeyResolver } from './plugins/keyResolver.ts'
import { connectRedis } from './plugins/redis.ts'
import { createPaymentGuard } from './plugins/paymentGuard.ts'
import { createKeyLimiter, type TierLimits } from './plugins/rateLimit.ts'
import { proxyRoutes } from './routes/proxy.ts'
import { rootRoutes } from './routes/root.ts'
import { gatewaySettings } from './settings.ts'

export const gatewayService: ServiceDefinition<typeof gatewaySettings, never> = {
  name: 'gateway',
  version: '0.1.0',
  port: 3000,
  edge: true,
  settings: gatewaySettings,
  async register(app, { config, nc, channels, name, version, onClose, addReadinessCheck }) {
    const redis = config.REDIS_URL ? await connectRedis(config.REDIS_URL) : undefined
    if (redis) {
      addReadinessCheck('redis', () => redis.ping())
      onClose(async () => void (await redis.quit()))
    } else app.log.warn('REDIS_URL is not set: rate limits are counted per gateway process')

    const keys = createKeyResolver(nc, channels, app.log, config.KEY_CACHE_TTL_MS)
    onClose(keys.close)
    const limits: TierLimits = {
      windowMs: config.RATE_LIMIT_WINDOW_MS,
      perTier: { readonly: config.RATE_LIMIT_READONLY, readwrite: config.RATE_LIMIT_READWRITE, admin: config.RATE_LIMIT_ADMIN },
    }
    const upstreams: Record<ServiceName, string> = {
      agent: config.AGENT_URL,
      trading: config.TRADING_URL,
      'market-data': config.MARKET_DATA_URL,
      automation: config.AUTOMATION_URL,
      admin: config.ADMIN_URL,
    }

    const limit = await createKeyLimiter(app, limits, redis)
    const blockedPayers = await watchBlockedPayers(nc, channels.payments.blockedPayers, app.log)
    const charges = await createChargePublisher(nc, channels.payments, app.log)
    onClose(blockedPayers.close)
    onClose(charges.close)
    app.decorateRequest('payment', null)
    const pay = createPaymentGuard(config, { redis, log: app.log, blockedPayers, charges })
    await app.register(rootRoutes, { name: 'agent-trading-service', version, chain: config.CHAIN_NAME, chainId: config.CHAIN_ID })
    await app.register(proxyRoutes, { upstreams, internalToken: config.INTERNAL_TOKEN, timeoutMs: config.UPSTREAM_TIMEOUT_MS, keys, limit, pay })
    app.log.info({ name, upstreams }, 'routes ready')
  },
}
