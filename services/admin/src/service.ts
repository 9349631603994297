import { fileURLToPath } from 'node:url'
import { adminContract, apiKeyPattern } from '@ats/contracts'
import {
  addNatsService,
  httpUrlSetting,
  openBucket,
  paymentSettings,
  publish,
  startEventOutbox,
  StartupError,
  type ChainContext,
  type ServiceDefinition,
} from '@ats/service-kit'
import { Type } from 'typebox'
import { PrismaClient, type WebhookSubscription } from './generated/prisma/client.ts'
import { createAgentPayers } from './agentPayers/agentPayers.ts'
import { startCredit } from './credit/credit.ts'
import { creditSettings } from './credit/settings.ts'
import { createKeyStore } from './keys/keyStore.ts'
import { serveAdminEndpoints } from './nats/admin.ts'
import { agentPayerRoutes } from './routes/agentPayers.ts'
import { createJobPayments, startJobOutcomes } from './payments/jobPayments.ts'
import { createLedger, paymentCounter } from './payments/ledger.ts'
import { startLedgerConsumer } from './payments/ledgerConsumer.ts'
import { onchainSettlement } from './payments/onchainSettlement.ts'
import { facilitatorSettlement, type Settlement } from './payments/settlement.ts'
import { startSettler } from './payments/settler.ts'
import { keyRoutes } from './routes/keys.ts'
import { payerRoutes } from './routes/payers.ts'
import { revenueRoutes } from './routes/revenue.ts'
import { walletRoutes } from './routes/wallet.ts'
import { webhookSubscriptionRoutes } from './routes/webhooks.ts'
import { startDeliveryPurge } from './webhooks/deliveryPurge.ts'
import { startDeliveryWorker } from './webhooks/deliveryWorker.ts'
import { startWebhookFanout } from './webhooks/fanout.ts'
import { parseRetrySchedule, retrySchedulePattern } from './webhooks/retrySchedule.ts'
import { createSubscriptions } from './webhooks/subscriptions.ts'
import { sendTestEvent } from './webhooks/testEvent.ts'

const schema = 'admin'

const settings = {
  ADMIN_API_KEY: Type.Optional(
    // the gateway refuses any key not of the key format: another value would lock the operator out
    Type.String({
      pattern: apiKeyPattern.source,
      hint: 'must be an API key: atsk_ followed by 32 characters of A-Z a-z 0-9 _ -; make one with: ADMIN_API_KEY=atsk_$(openssl rand -hex 16)',
      secret: true,
      description: 'bootstrap admin key (atsk_ + 32 base64url characters), seeded (hashed) at start; changing it revokes the previous one',
    }),
  ),
  ...paymentSettings,
  FACILITATOR_URL: Type.Optional(httpUrlSetting({ description: 'x402 facilitator to settle through (POST /settle)' })),
  SETTLEMENT_ENABLED: Type.Boolean({ default: true, description: 'settle recorded payments; false records them as skipped' }),
  SETTLEMENT_INTERVAL_MS: Type.Integer({ minimum: 50, default: 1_000, description: 'how often the settler looks for due payments' }),
  SETTLEMENT_MAX_ATTEMPTS: Type.Integer({ minimum: 1, default: 5, description: 'attempts before a payment is marked failed' }),
  SETTLEMENT_LEASE_MS: Type.Integer({
    minimum: 1_000,
    maximum: 3_600_000,
    default: 120_000,
    description:
      'how long a settler holds a claimed payment; after it, another replica (or a restarted admin) takes it up and checks its kept transaction. Each receipt wait is at most a third of it (60 s at most), and an attempt waits at most twice (its kept transaction, then a new batch), so it ends inside the lease',
  }),
  SETTLEMENT_RETRY_MS: Type.Integer({
    minimum: 100,
    maximum: 60_000,
    default: 1_000,
    description: 'how long a settlement that failed transiently waits before its first retry; each next wait doubles, up to 60 s',
  }),
  SETTLEMENT_BATCH_SIZE: Type.Integer({
    minimum: 1,
    maximum: 1_000,
    default: 100,
    description:
      'payments claimed and settled together: on chain, one transaction (Multicall3 aggregate3) for as many as SETTLEMENT_BATCH_GAS allows; through a facilitator, one /settle each, 10 at a time. 1 settles each payment on its own',
  }),
  SETTLEMENT_BATCH_GAS: Type.Integer({
    minimum: 200_000,
    maximum: 32_000_000,
    default: 8_000_000,
    description:
      'the most gas one settlement transaction may use (its estimate plus 25%); a batch over it goes as several transactions. Arbitrum One takes up to 32,000,000 a block',
  }),
  SETTLEMENT_PIPELINE_DEPTH: Type.Integer({
    minimum: 1,
    maximum: 32,
    default: 4,
    description:
      'settlement batches in flight at once: the next is signed and broadcast while earlier ones wait for their receipts. 1 waits for each receipt before the next batch',
  }),
  LEDGER_RETRY_MS: Type.Integer({
    minimum: 100,
    maximum: 60_000,
    default: 2_000,
    description:
      'how long a batch of charged payments that could not be recorded waits before it is tried again (3 tries, then the dead letters)',
  }),
  WEBHOOK_MAX_PER_KEY: Type.Integer({
    minimum: 1,
    maximum: 1000,
    default: 20,
    description: 'webhook subscriptions one API key may have (409 past it)',
  }),
  WEBHOOK_SECRET_GRACE_MS: Type.Integer({
    minimum: 0,
    maximum: 30 * 86_400_000,
    default: 86_400_000,
    description: 'how long the old secret of a rotated webhook stays valid; meanwhile deliveries are signed with both',
  }),
  WEBHOOK_CONCURRENCY: Type.Integer({
    minimum: 1,
    maximum: 200,
    default: 10,
    description: 'webhook deliveries one admin replica sends at once',
  }),
  WEBHOOK_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    maximum: 60_000,
    default: 10_000,
    description: 'how long one webhook delivery attempt may take before it counts as failed',
  }),
  WEBHOOK_POLL_MS: Type.Integer({
    minimum: 50,
    maximum: 60_000,
    default: 500,
    description: 'how often an admin replica looks for webhook deliveries that are due (retries); a new event wakes it at once',
  }),
  WEBHOOK_FANOUT_ACK_WAIT_MS: Type.Integer({
    minimum: 1_000,
    maximum: 300_000,
    default: 10_000,
    description:
      'how long an event taken by an admin replica for webhook fan-out stays its own; an event of a replica that died is fanned out by another after it',
  }),
  WEBHOOK_RETRY_SCHEDULE: Type.String({
    pattern: retrySchedulePattern,
    default: '5s,5m,30m,2h,5h,10h,10h',
    hint: 'must be durations like 100ms, 5s, 5m or 2h, comma-separated',
    description:
      'delays between tries of a failed webhook delivery (each ±20% jitter); past the last one the delivery is marked failed. The default spans about a day',
  }),
  WEBHOOK_DISABLE_AFTER_MS: Type.Integer({
    minimum: 1,
    default: 5 * 86_400_000,
    description:
      'a webhook subscription whose deliveries have all failed for this long is disabled (with the reason) when one more fails for good',
  }),
  WEBHOOK_DELIVERY_RETENTION_DAYS: Type.Integer({
    minimum: 1,
    default: 30,
    description:
      'days a webhook delivery that ended (succeeded or failed) stays in the delivery log; older ones are deleted every hour. Pending ones are kept',
  }),
  WEBHOOK_ALLOW_HTTP: Type.Boolean({ default: false, description: 'development only: allow http:// webhook URLs (otherwise https only)' }),
  WEBHOOK_ALLOW_PRIVATE_ADDRESSES: Type.Boolean({
    default: false,
    description:
      'development only: allow webhook URLs that resolve to loopback, private, link-local or metadata addresses (otherwise refused, also at delivery time)',
  }),
  // prepaid credit (src/credit/settings.ts)
  ...creditSettings,
}

export const adminService: ServiceDefinition<typeof settings, PrismaClient, 'write'> = {
  name: 'admin',
  version: '0.1.0',
  port: 3005,
  // settles on chain from the server wallet (SERVER_WALLET_PRIVATE_KEY)
  chain: 'write',
  settings,
  database: {
    schema,
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { db, nc, channels, config, version, onClose, chain, log, metrics }) {
    const { keyRevoked, keyCreated, payments } = channels.admin
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
    const credit = await startCredit({ app, db, nc, channels, config, chain, events, log, metrics, onClose })

    const nats = await addNatsService(nc, adminContract.name, version, 'API keys, payments ledger, revenue, credit')
    onClose(async () => {
      await nats.stop()
    })
    serveAdminEndpoints(nats, { channels, log, keys, agentPayers, jobPayments, credit })

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
    const outcomes = await startJobOutcomes({ nc, channels: payments, jobPayments, log, intervalMs: config.SETTLEMENT_INTERVAL_MS })
    onClose(outcomes.stop)
    const blockedPayers = await openBucket(nc, payments.blockedPayers)
    if (settlement) {
      const settler = startSettler({
        ledger,
        settlement,
        blockedPayers,
        log,
        intervalMs: config.SETTLEMENT_INTERVAL_MS,
        maxAttempts: config.SETTLEMENT_MAX_ATTEMPTS,
        leaseMs: config.SETTLEMENT_LEASE_MS,
        retryMs: config.SETTLEMENT_RETRY_MS,
        batchSize: config.SETTLEMENT_BATCH_SIZE,
        pipelineDepth: config.SETTLEMENT_PIPELINE_DEPTH,
      })
      onClose(settler.stop)
    }

    await app.register(keyRoutes, { keys, nc, keyRevoked, keyCreated })
    await app.register(payerRoutes, { blockedPayers, log })
    await app.register(agentPayerRoutes, { payers: agentPayers })
    await app.register(walletRoutes, { bucket: await openBucket(nc, channels.admin.walletControl) })
    await startWebhooks(app, { db, nc, channels: channels.admin, config, log, onClose })
    await app.register(revenueRoutes, {
      ledger,
      price: BigInt(config.PAYMENT_PRICE),
      storage: `postgres (schema ${schema}, table payments)`,
    })
  },
}

type AdminContext = Parameters<typeof adminService.register>[1]
type AdminConfig = AdminContext['config']

/**
 * Webhooks: the routes, the fan-out of events to subscriptions, the sender, and the purge of
 * old deliveries. The fan-out starts after the sender so that its first deliveries wake it.
 */
async function startWebhooks(
  app: Parameters<typeof adminService.register>[0],
  {
    db,
    nc,
    channels,
    config,
    log,
    onClose,
  }: Pick<AdminContext, 'db' | 'nc' | 'config' | 'log' | 'onClose'> & { channels: AdminContext['channels']['admin'] },
) {
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
  const sender = startDeliveryWorker({
    db,
    log,
    rules,
    concurrency: config.WEBHOOK_CONCURRENCY,
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    retrySchedule,
    disableAfterMs: config.WEBHOOK_DISABLE_AFTER_MS,
    pollMs: config.WEBHOOK_POLL_MS,
  })
  onClose(sender.stop)
  const purge = startDeliveryPurge({ db, log, retentionDays: config.WEBHOOK_DELIVERY_RETENTION_DAYS })
  onClose(purge.stop)
  const fanout = await startWebhookFanout({ nc, channels, db, log, onQueued: sender.wake, ackWaitMs: config.WEBHOOK_FANOUT_ACK_WAIT_MS })
  onClose(fanout.stop)
  const subscriptions = createSubscriptions(db, { maxPerKey: config.WEBHOOK_MAX_PER_KEY, secretGraceMs: config.WEBHOOK_SECRET_GRACE_MS })
  const sendTest = (sub: WebhookSubscription) => sendTestEvent(db, sub, { rules, timeoutMs: config.WEBHOOK_TIMEOUT_MS })
  await app.register(webhookSubscriptionRoutes, { subscriptions, rules, sendTest, onQueued: sender.wake })
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
