// The automation service: the wiring of its store, NATS endpoints, routes and scheduler.
import { fileURLToPath } from 'node:url'
import { automationContract, tradingTokens } from '@ats/contracts'
import {
  addNatsService,
  cachedLoader,
  callEndpoint,
  serveEndpoint,
  startEventOutbox,
  type ServiceDefinition,
  packageVersion,
} from '@ats/service-kit'
import { watchWalletControl } from '@ats/wallet'
import { createAutomations, ownerOf } from './automations/automations.ts'
import { createPriceReader } from './automations/prices.ts'
import { automationView, createStore, runCounter } from './automations/store.ts'
import { PrismaClient } from './generated/prisma/client.ts'
import { automationsRoutes } from './routes/automations.ts'
import { startApprovalWatch } from './scheduler/approvals.ts'
import { startScheduler } from './scheduler/scheduler.ts'
import { automationSettings } from './settings.ts'

const schema = 'automation'

export const automationService: ServiceDefinition<typeof automationSettings, PrismaClient> = {
  name: 'automation',
  version: packageVersion(import.meta.url),
  port: 3004,
  settings: automationSettings,
  database: {
    schema,
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { db, nc, channels, config, version, onClose, log, metrics }) {
    // the webhook events of runs and automations, written in the transaction that ends them
    const events = await startEventOutbox({ nc, channels: channels.admin.events, databaseUrl: config.DATABASE_URL!, schema, log })
    onClose(events.stop)
    const store = createStore(db, {
      maxPerOwner: config.AUTOMATION_MAX_PER_KEY,
      triggerCheckMs: config.AUTOMATION_TRIGGER_CHECK_MS,
      events,
      runsCounted: runCounter(metrics),
    })

    // the chain's tokens, from trading (what its swaps accept), kept 10 minutes (one call, shared by concurrent lookups)
    const tokenList = cachedLoader({
      max: 1,
      ttlMs: 600_000,
      load: () => callEndpoint(nc, channels.trading.tokens, {}, { timeoutMs: 5_000 }),
    })
    const tokens = tradingTokens(() => tokenList.get('all'))
    const priceOf = createPriceReader({
      nc,
      channels,
      maxAgeMs: config.AUTOMATION_PRICE_MAX_AGE_MS,
      reuseMs: Math.min(1_000, config.AUTOMATION_TRIGGER_CHECK_MS / 2),
    })
    const automations = createAutomations({ nc, channels, store, log, tokens, minIntervalMs: config.AUTOMATION_MIN_INTERVAL_MS, priceOf })

    const nats = await addNatsService(nc, automationContract.name, version, 'automations and their scheduler')
    onClose(() => nats.stop().then(() => undefined))
    // what the agent's jobs ask, with the identity of their key or payer
    const { create, list, setStatus } = channels.automation
    serveEndpoint(nats, create, log, async (request, { identity }) => automations.create(ownerOf(identity), request))
    serveEndpoint(nats, list, log, async ({ wallet }, { identity }) => ({
      automations: (await store.list(ownerOf(identity), wallet)).map(automationView),
    }))
    serveEndpoint(nats, setStatus, log, async ({ id, status }, { identity }) => automations.setStatus(ownerOf(identity), id, status))
    await app.register(automationsRoutes, { store, automations })

    if (config.AUTOMATION_SCHEDULER) {
      const walletControl = await watchWalletControl(nc, channels.admin.walletControl, log)
      onClose(walletControl.close)
      const scheduler = startScheduler({ walletControl, nc, channels, store, log, tokens, settings: config, priceOf })
      onClose(scheduler.stop)
      const approvalWatch = startApprovalWatch({ nc, channels, store, log, settings: config })
      onClose(approvalWatch.stop)
      log.info({ tickMs: config.AUTOMATION_TICK_MS, minIntervalMs: config.AUTOMATION_MIN_INTERVAL_MS }, 'automation scheduler started')
    }
  },
}
