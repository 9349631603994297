import type { FastifyServerOptions } from 'fastify'
import { StartupError, type ServiceDefinition, packageVersion } from '@ats/service-kit'
import { createCredit } from './credit/index.ts'
import { creditRoutes } from './credit/routes.ts'
import { createAuthFailureLimiter } from './auth/authFailures.ts'
import type { AuthDeps } from './auth/authHook.ts'
import { createConcurrencyLimiter } from './auth/concurrency.ts'
import { createKeyResolver } from './auth/keyResolver.ts'
import { createKeyLimiter, createPaidLimiter, type TierLimits } from './auth/rateLimit.ts'
import { createPaidJobFollower } from './mcp/paid.ts'
import { mcpRoutes } from './mcp/server.ts'
import { watchBlockedPayers } from './payments/blockedPayers.ts'
import { createChargePublisher } from './payments/chargePublisher.ts'
import { createPaymentGuard } from './payments/paymentGuard.ts'
import { installBodyLimit } from './routes/bodyLimit.ts'
import { proxyRoutes } from './routes/proxy.ts'
import { consoleRoutes } from './routes/console.ts'
import { rootRoutes } from './routes/root.ts'
import type { UpstreamName } from './routing/routeTable.ts'
import { clientErrorHandler, serverTimeouts } from './routes/timeouts.ts'
import { gatewaySettings, trustProxyOf } from './settings.ts'

export const gatewayService: ServiceDefinition<typeof gatewaySettings, never, 'read'> = {
  name: 'gateway',
  version: packageVersion(import.meta.url),
  port: 3000,
  edge: true,
  redis: 'optional',
  chain: 'read',
  settings: gatewaySettings,
  fastify: (config) =>
    ({ trustProxy: trustProxyOf(config.TRUST_PROXY), ...serverTimeouts(config), clientErrorHandler }) as Partial<FastifyServerOptions>,
  async register(app, { config, nc, channels, name, version, onClose, redis, chain, log }) {
    if (config.SKIP_PAYMENT && chain.chainId === 42161) {
      throw new StartupError('SKIP_PAYMENT=true is refused on Arbitrum One (CHAIN_ID 42161): it serves paid routes for free')
    }
    if (config.SPEND_TIMEOUT_MS < config.UPSTREAM_TIMEOUT_MS) {
      // a swap outlived by the gateway's wait answers 504 while it goes on: a client retries it
      throw new StartupError(
        `SPEND_TIMEOUT_MS (${config.SPEND_TIMEOUT_MS}) must be at least UPSTREAM_TIMEOUT_MS (${config.UPSTREAM_TIMEOUT_MS}): spending routes wait for receipts`,
      )
    }
    if (!redis)
      log.warn('REDIS_URL is not set: rate limits are kept per gateway process (paid routes need Redis: they refuse to start without it)')

    const keys = createKeyResolver(nc, channels.admin, log, config.KEY_CACHE_TTL_MS)
    onClose(keys.close)
    const limits: TierLimits = {
      windowMs: config.RATE_LIMIT_WINDOW_MS,
      perTier: { readonly: config.RATE_LIMIT_READONLY, readwrite: config.RATE_LIMIT_READWRITE, admin: config.RATE_LIMIT_ADMIN },
    }
    const upstreams: Record<UpstreamName, string> = {
      agent: config.AGENT_URL,
      trading: config.TRADING_URL,
      'market-data': config.MARKET_DATA_URL,
      automation: config.AUTOMATION_URL,
      admin: config.ADMIN_URL,
    }

    const limit = await createKeyLimiter(app, limits, redis)
    const paid = createPaidLimiter(app, {
      namespace: config.NATS_NAMESPACE,
      windowMs: config.RATE_LIMIT_WINDOW_MS,
      perAddress: config.PAID_RATE_LIMIT_PER_ADDRESS,
      perPayer: config.PAID_RATE_LIMIT_PER_PAYER,
    })
    // requests in flight per client address, counted first (before the body limit and auth)
    const concurrency = createConcurrencyLimiter()
    // callback style, not async: no promise on every request (a throw is Fastify's error path all the same)
    app.addHook('onRequest', (request, reply, done) => {
      concurrency.enter(request, reply, `address:${request.ip}`, config.MAX_CONCURRENT_PER_ADDRESS, 'client address')
      done()
    })
    const failures = createAuthFailureLimiter({
      redis,
      namespace: config.NATS_NAMESPACE,
      limit: config.AUTH_FAILURE_LIMIT,
      payerLimit: config.PAYER_FAILURE_LIMIT,
      windowMs: config.RATE_LIMIT_WINDOW_MS,
    })
    const blockedPayers = await watchBlockedPayers(nc, channels.admin.payments.blockedPayers, log)
    const charges = await createChargePublisher(nc, channels.admin.payments, log)
    onClose(blockedPayers.close)
    onClose(charges.close)
    app.decorateRequest('payment', null)
    app.decorateRequest('paymentRefusal', null)
    installBodyLimit(app, config.BODY_LIMIT_BYTES)
    // prepaid credit rides on the paid routes: with payments on (PAY_TO, Redis) and not skipped
    const credit =
      redis && config.PAY_TO && !config.SKIP_PAYMENT ? await createCredit({ config, nc, channels, redis, chain, log }) : undefined
    if (credit) onClose(credit.close)
    app.decorateRequest('credit', null)
    const pay = createPaymentGuard(config, { redis, log, blockedPayers, charges, chain, credit: credit?.guard })
    const auth: AuthDeps = {
      keys,
      limit,
      pay,
      failures,
      paid,
      concurrency,
      maxPerKey: config.MAX_CONCURRENT_PER_KEY,
      ...(credit ? { credit: credit.guard } : {}),
    }
    if (credit) await app.register(creditRoutes, { guard: credit.guard, pay, auth })
    await app.register(rootRoutes, { name: 'agent-trading-service', version, chain: config.CHAIN_NAME, chainId: chain.chainId })
    await app.register(consoleRoutes)
    await app.register(proxyRoutes, {
      upstreams,
      internalToken: config.INTERNAL_TOKEN,
      timeoutMs: config.UPSTREAM_TIMEOUT_MS,
      longTimeoutMs: config.CHAT_TIMEOUT_MS,
      spendTimeoutMs: config.SPEND_TIMEOUT_MS,
      connections: config.UPSTREAM_CONNECTIONS,
      auth,
    })
    // a paid prompt's tool call waits for its job as long as a /v1 completion would
    const followJob = createPaidJobFollower({
      agentUrl: config.AGENT_URL,
      internalToken: config.INTERNAL_TOKEN,
      waitMs: config.CHAT_TIMEOUT_MS,
      log,
    })
    await app.register(mcpRoutes, {
      name: 'agent-trading-service',
      version,
      price: config.PAYMENT_PRICE,
      tokens: () => chain.tokens().all,
      auth,
      followJob,
    })
    log.info({ name, upstreams }, 'routes ready')
  },
}
