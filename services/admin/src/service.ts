// The admin service: the wiring of keys, the payments ledger and its settlement, credit and webhooks to its NATS endpoints and routes.
import { fileURLToPath } from 'node:url'
import { adminContract } from '@ats/contracts'
import {
  addNatsService,
  openBucket,
  publish,
  serveEndpoint,
  startEventOutbox,
  StartupError,
  type ChainContext,
  type ServiceDefinition,
  packageVersion,
} from '@ats/service-kit'
import { PrismaClient, type WebhookSubscription } from './generated/prisma/client.ts'
import { createAgentPayers } from './agentPayers/agentPayers.ts'
import { startCredit } from './credit/credit.ts'
import { createKeyStore } from './keys/keyStore.ts'
import { agentPayersRoutes } from './routes/agentPayers.ts'
import { createJobPayments, startJobOutcomes } from './payments/jobPayments.ts'
import { createLedger, paymentCounter } from './payments/ledger.ts'
import { startLedgerConsumer } from './payments/ledgerConsumer.ts'
import { onchainSettlement } from './payments/onchainSettlement.ts'
import { facilitatorSettlement, type Settlement } from './payments/settlement.ts'
import { startSettler } from './payments/settler.ts'
import { keysRoutes } from './routes/keys.ts'
import { payersRoutes } from './routes/payers.ts'
import { revenueRoutes } from './routes/revenue.ts'
import { walletRoutes } from './routes/wallet.ts'
import { webhooksRoutes } from './routes/webhooks.ts'
import { adminSettings } from './settings.ts'
import { startDeliveryPurge } from './webhooks/deliveryPurge.ts'
import { startDeliveryWorker } from './webhooks/deliveryWorker.ts'
import { startWebhookFanout } from './webhooks/fanout.ts'
import { parseRetrySchedule } from './webhooks/retrySchedule.ts'
import { createSubscriptions } from './webhooks/subscriptions.ts'
import { sendTestEvent } from './webhooks/testEvent.ts'

const schema = 'admin'

export const adminService: ServiceDefinition<typeof adminSettings, PrismaClient, 'write'> = {
  name: 'admin',
  version: packageVersion(import.meta.url),
  port: 3005,
  // settles on chain from the server wallet (SERVER_WALLET_PRIVATE_KEY)
  chain: 'write',
  settings: adminSettings,
  database: {
    schema,
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, context) {
    const { db, nc, channels, config, version, onClose, chain, log, metrics } = context
    const { keyRevoked, payments, keyVerify, keyPolicy, agentPayer, paymentsOfJobs, creditSnapshot } = channels.admin
    const keys = createKeyStore(db)
    // payment.settled and payment.voided are recorded with their state change, published from here
    const events = await startEventOutbox({ nc, channels: channels.admin.events, databaseUrl: config.DATABASE_URL!, schema, log })
    onClose(events.stop)
    const agentPayers = createAgentPayers(db)
    const counted = paymentCounter(metrics)
    // payments of agent jobs: held until the agent says how the job ended, then due or voided
    const jobPayments = createJobPayments(db, { settle: config.SETTLEMENT_ENABLED, events, counted })

    if (config.ADMIN_API_KEY) {
      const { revoked, state } = await keys.seedBootstrap(config.ADMIN_API_KEY)
      for (const key of revoked) publish(nc, keyRevoked, { id: key.id, hash: key.hash })
      if (state === 'revoked') log.warn('ADMIN_API_KEY was revoked by an admin and stays revoked: set a new one')
      else log.info({ state, retired: revoked.length }, 'bootstrap admin key ready')
    }

    // prepaid credit: its ledger, consumers, sweeps and routes; the snapshot endpoint below serves it
    const credit = await startCredit(app, context, events)

    const nats = await addNatsService(nc, adminContract.name, version, 'API keys, payments ledger, revenue, credit')
    onClose(() => nats.stop().then(() => undefined))
    // what the gateway, trading, automation and the agent ask of admin
    serveEndpoint(nats, keyVerify, log, async ({ hash }) => ({ key: await keys.findActiveByHash(hash) }))
    serveEndpoint(nats, keyPolicy, log, async ({ keyId }) => ({ key: await keys.findActiveById(keyId) }))
    serveEndpoint(nats, agentPayer, log, async ({ address }) => ({ payer: await agentPayers.get(address) }))
    serveEndpoint(nats, paymentsOfJobs, log, async ({ jobIds }) => ({ payments: await jobPayments.ofJobs(jobIds) }))
    serveEndpoint(nats, creditSnapshot, log, ({ wallet }) => credit.snapshot(wallet))

    const settlement = chooseSettlement(config, chain)
    if (!settlement) {
      log.warn(
        config.SETTLEMENT_ENABLED
          ? 'neither SERVER_WALLET_PRIVATE_KEY nor FACILITATOR_URL is set: payments are recorded and stay pending until one is'
          : 'SETTLEMENT_ENABLED=false: payments are recorded as skipped, never settled',
      )
    }
    const ledger = createLedger(db, { settle: config.SETTLEMENT_ENABLED, events, counted })
    const consumer = await startLedgerConsumer(nc, payments, ledger, log, config.LEDGER_RETRY_MS)
    onClose(consumer.stop)
    const outcomes = await startJobOutcomes(nc, payments, jobPayments, log, config.SETTLEMENT_INTERVAL_MS)
    onClose(outcomes.stop)
    const blockedPayers = await openBucket(nc, payments.blockedPayers)
    if (settlement) {
      const settler = startSettler(ledger, settlement, blockedPayers, log, config)
      onClose(settler.stop)
    }

    await app.register(keysRoutes, { keys, nc, channels: channels.admin })
    await app.register(payersRoutes, { blockedPayers, log })
    await app.register(agentPayersRoutes, { payers: agentPayers })
    await app.register(walletRoutes, { bucket: await openBucket(nc, channels.admin.walletControl) })
    await startWebhooks(app, context)
    await app.register(revenueRoutes, {
      ledger,
      price: BigInt(config.PAYMENT_PRICE),
      storage: `postgres (schema ${schema}, table payments)`,
    })
  },
}

export type AdminContext = Parameters<typeof adminService.register>[1]
export type AdminConfig = AdminContext['config']

/**
 * Webhooks: the routes, the fan-out of events to subscriptions, the sender, and the purge of
 * old deliveries. The fan-out starts after the sender so that its first deliveries wake it.
 */
async function startWebhooks(app: Parameters<typeof adminService.register>[0], { db, nc, channels, config, log, onClose }: AdminContext) {
  let retrySchedule: number[]
  try {
    retrySchedule = parseRetrySchedule(config.WEBHOOK_RETRY_SCHEDULE)
  } catch (error) {
    throw new StartupError(`WEBHOOK_RETRY_SCHEDULE: ${(error as Error).message}`)
  }
  const rules = { allowHttp: config.WEBHOOK_ALLOW_HTTP, allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_ADDRESSES }
  if (rules.allowHttp || rules.allowPrivate) {
    log.warn(rules, 'webhook development settings are on (WEBHOOK_ALLOW_HTTP / WEBHOOK_ALLOW_PRIVATE_ADDRESSES): never in production')
  }
  const sender = startDeliveryWorker({ db, log, rules, retrySchedule, settings: config })
  onClose(sender.stop)
  const purge = startDeliveryPurge({ db, log, retentionDays: config.WEBHOOK_DELIVERY_RETENTION_DAYS })
  onClose(purge.stop)
  const fanout = await startWebhookFanout({
    nc,
    channels: channels.admin,
    db,
    log,
    onQueued: sender.wake,
    ackWaitMs: config.WEBHOOK_FANOUT_ACK_WAIT_MS,
  })
  onClose(fanout.stop)
  const subscriptions = createSubscriptions(db, { maxPerKey: config.WEBHOOK_MAX_PER_KEY, secretGraceMs: config.WEBHOOK_SECRET_GRACE_MS })
  const sendTest = (sub: WebhookSubscription) => sendTestEvent(db, sub, { rules, timeoutMs: config.WEBHOOK_TIMEOUT_MS })
  await app.register(webhooksRoutes, { subscriptions, rules, sendTest, onQueued: sender.wake })
}

function chooseSettlement(config: AdminConfig, chain: ChainContext): Settlement | undefined {
  if (!config.SETTLEMENT_ENABLED) return undefined
  // the chain (RPC_URL) is read only to trace an authorization the facilitator says is used
  if (config.FACILITATOR_URL) return facilitatorSettlement(config.FACILITATOR_URL, chain)
  // the receipt wait ends well inside the lease (the settler starts attempts in its first third only)
  return chain.hasWallet
    ? onchainSettlement(chain, {
        receiptTimeoutMs: Math.min(60_000, Math.floor(config.SETTLEMENT_LEASE_MS / 3)),
        batchGas: BigInt(config.SETTLEMENT_BATCH_GAS),
      })
    : undefined
}
