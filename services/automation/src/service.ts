// The automation service: its settings, and the wiring of its store, NATS endpoints, routes and scheduler.
import { fileURLToPath } from 'node:url'
import { automationContract, tradingTokens } from '@ats/contracts'
import { addNatsService, cachedLoader, callEndpoint, startEventOutbox, watchWalletControl, type ServiceDefinition } from '@ats/service-kit'
import { Type } from 'typebox'
import { createAutomations } from './automations/automations.ts'
import { createStore, runCounter } from './automations/store.ts'
import { PrismaClient } from './generated/prisma/client.ts'
import { serveAutomationEndpoints } from './nats/automations.ts'
import { automationsRoutes } from './routes/automations.ts'
import { startApprovalWatch } from './scheduler/approvals.ts'
import { startScheduler } from './scheduler/scheduler.ts'

const ms = (description: string, defaultMs: number, minimum = 100) => Type.Integer({ minimum, default: defaultMs, description })

const settings = {
  AUTOMATION_SCHEDULER: Type.Boolean({ default: true, description: 'run the scheduler in this process (false: routes only)' }),
  AUTOMATION_TICK_MS: ms('how often the scheduler looks for due automations', 1_000, 50),
  AUTOMATION_BATCH: Type.Integer({ minimum: 1, maximum: 1000, default: 50, description: 'due automations one tick takes at most' }),
  AUTOMATION_MIN_INTERVAL_MS: ms('the shortest interval (and limit-order checkEvery) an automation may have', 60_000, 1_000),
  AUTOMATION_LEASE_MS: ms(
    'a run its scheduler has not finished by then (it died) is resumed by another, with the same idempotency key',
    120_000,
    1_000,
  ),
  AUTOMATION_MAX_FAILURES: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 3,
    description: 'failed runs in a row before an automation fails',
  }),
  AUTOMATION_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 20,
    default: 5,
    description: 'tries of one run whose swap timed out before the run fails',
  }),
  AUTOMATION_EXECUTE_TIMEOUT_MS: ms("how long a run waits for trading's swap (mined)", 90_000, 1_000),
  AUTOMATION_MAX_PER_KEY: Type.Integer({
    minimum: 1,
    maximum: 10_000,
    default: 10,
    description: 'active or paused automations one API key (or agent payer) may have; creating or resuming one more answers 409',
  }),
  APPROVAL_POLL_MS: ms('how often the scheduler asks trading whether the approval a run waits for was decided', 2_000),
}

export const automationService: ServiceDefinition<typeof settings, PrismaClient> = {
  name: 'automation',
  version: '0.1.0',
  port: 3004,
  settings,
  database: {
    schema: 'automation',
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { db, nc, channels, config, version, onClose, log, metrics }) {
    // the webhook events of runs and automations, written in the transaction that ends them
    const events = await startEventOutbox({
      nc,
      channels: channels.admin.events,
      databaseUrl: config.DATABASE_URL!,
      schema: 'automation',
      log,
    })
    onClose(events.stop)
    const store = createStore(db, { maxPerOwner: config.AUTOMATION_MAX_PER_KEY, events, runsCounted: runCounter(metrics) })

    // the chain's tokens, from trading (what its swaps accept)
    // the list, kept 10 minutes (one call to trading, shared by concurrent lookups)
    const tokenList = cachedLoader({
      max: 1,
      ttlMs: 600_000,
      load: () => callEndpoint(nc, channels.trading.tokens, {}, { timeoutMs: 5_000 }),
    })
    const tokens = tradingTokens(() => tokenList.get('all'))
    const automations = createAutomations({ nc, channels, store, log, tokens, minIntervalMs: config.AUTOMATION_MIN_INTERVAL_MS })

    const nats = await addNatsService(nc, automationContract.name, version, 'automations and their scheduler')
    onClose(async () => {
      await nats.stop()
    })
    serveAutomationEndpoints(nats, { channels, log, store, automations })
    await app.register(automationsRoutes, { store, automations })

    if (config.AUTOMATION_SCHEDULER) {
      const walletControl = await watchWalletControl(nc, channels.admin.walletControl, log)
      onClose(walletControl.close)
      const scheduler = startScheduler({
        walletControl,
        nc,
        channels,
        store,
        log,
        tokens,
        settings: {
          tickMs: config.AUTOMATION_TICK_MS,
          batch: config.AUTOMATION_BATCH,
          leaseMs: config.AUTOMATION_LEASE_MS,
          maxFailures: config.AUTOMATION_MAX_FAILURES,
          maxAttempts: config.AUTOMATION_MAX_ATTEMPTS,
          executeTimeoutMs: config.AUTOMATION_EXECUTE_TIMEOUT_MS,
          approvalPollMs: config.APPROVAL_POLL_MS,
        },
      })
      onClose(scheduler.stop)
      const approvalWatch = startApprovalWatch({
        nc,
        channels,
        store,
        log,
        settings: {
          pollMs: config.APPROVAL_POLL_MS,
          batch: config.AUTOMATION_BATCH,
          maxFailures: config.AUTOMATION_MAX_FAILURES,
          timeoutMs: 10_000,
        },
      })
      onClose(approvalWatch.stop)
      log.info({ tickMs: config.AUTOMATION_TICK_MS, minIntervalMs: config.AUTOMATION_MIN_INTERVAL_MS }, 'automation scheduler started')
    }
  },
}
