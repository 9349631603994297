import { fileURLToPath } from 'node:url'
import { adminContract } from '@ats/contracts'
import { addNatsService, openBucket, paymentSettings, publish, serveEndpoint, type ChainContext, type ServiceDefinition } from '@ats/service-kit'
import { Type } from 'typebox'
import { PrismaClient } from './generated/prisma/client.ts'
import { createAgentPayers } from './agentPayers/agentPayers.ts'
import { createKeyStore } from './keys/keyStore.ts'
import { agentPayerRoutes } from './routes/agentPayers.ts'
import { createLedger } from './payments/ledger.ts'
import { startLedgerConsumer } from './payments/ledgerConsumer.ts'
import { facilitatorSettlement, onchainSettlement, type Settlement } from './payments/settlement.ts'
import { startSettler } from './payments/settler.ts'
import { keyRoutes } from './routes/keys.ts'
import { payerRoutes } from './routes/payers.ts'
import { revenueRoutes } from './routes/revenue.ts'

const schema = 'admin'

const settings = {
  ADMIN_API_KEY: Type.Optional(
    Type.String({
      minLength: 24,
      secret: true,
      description: 'bootstrap admin key, seeded (hashed) at start; changing it revokes the previous one',
    }),
  ),
  ...paymentSettings,
  FACILITATOR_URL: Type.Optional(Type.String({ pattern: '^https?://', description: 'x402 facilitator to settle through (POST /settle)' })),
  SETTLEMENT_ENABLED: Type.Boolean({ default: true, description: 'settle recorded payments; false records them as skipped' }),
  SETTLEMENT_INTERVAL_MS: Type.Integer({ minimum: 50, default: 1_000, description: 'how often the settler looks for due payments' }),
  SETTLEMENT_MAX_ATTEMPTS: Type.Integer({ minimum: 1, default: 5, description: 'attempts before a payment is marked failed' }),
}

export const adminService: ServiceDefinition<typeof settings, PrismaClient> = {
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
  async register(app, { db, nc, channels, config, version, onClose, chain, log }) {
    const { keyVerify, keyPolicy, keyRevoked, payments, agentPayer } = channels.admin
    const keys = createKeyStore(db)
    const agentPayers = createAgentPayers(db)

    if (config.ADMIN_API_KEY) {
      const { revoked, state } = await keys.seedBootstrap(config.ADMIN_API_KEY)
      for (const key of revoked) publish(nc, keyRevoked, { id: key.id, hash: key.hash })
      if (state === 'revoked') app.log.warn('ADMIN_API_KEY was revoked by an admin and stays revoked: set a new one')
      else app.log.info({ state, retired: revoked.length }, 'bootstrap admin key ready')
    }

    const nats = await addNatsService(nc, adminContract.name, version, 'API keys, payments ledger, revenue')
    onClose(async () => {
      await nats.stop()
    })
    serveEndpoint(nats, 'keys-verify', keyVerify, log, async ({ hash }) => ({ key: await keys.findActiveByHash(hash) }))
    serveEndpoint(nats, 'keys-policy', keyPolicy, log, async ({ keyId }) => ({ key: await keys.findActiveById(keyId) }))
    serveEndpoint(nats, 'agent-payers-get', agentPayer, log, async ({ address }) => ({ payer: await agentPayers.get(address) }))

    const settlement = chooseSettlement(config, chain)
    if (!settlement) {
      app.log.warn(
        config.SETTLEMENT_ENABLED
          ? 'neither SERVER_WALLET_PRIVATE_KEY nor FACILITATOR_URL is set: payments are recorded and stay pending until one is'
          : 'SETTLEMENT_ENABLED=false: payments are recorded as skipped, never settled',
      )
    }
    const ledger = createLedger(db, { settle: config.SETTLEMENT_ENABLED })
    const consumer = await startLedgerConsumer(nc, payments, ledger, log)
    onClose(consumer.stop)
    const blockedPayers = await openBucket(nc, payments.blockedPayers)
    if (settlement) {
      const settler = startSettler({
        ledger,
        settlement,
        blockedPayers,
        log,
        intervalMs: config.SETTLEMENT_INTERVAL_MS,
        maxAttempts: config.SETTLEMENT_MAX_ATTEMPTS,
      })
      onClose(settler.stop)
    }

    await app.register(keyRoutes, { keys, nc, keyRevoked })
    await app.register(payerRoutes, { blockedPayers, log })
    await app.register(agentPayerRoutes, { payers: agentPayers })
    await app.register(revenueRoutes, { ledger, price: BigInt(config.PAYMENT_PRICE), storage: `postgres (schema ${schema}, table payments)` })
  },
}

type AdminConfig = Parameters<typeof adminService.register>[1]['config']

function chooseSettlement(config: AdminConfig, chain: ChainContext): Settlement | undefined {
  if (!config.SETTLEMENT_ENABLED) return undefined
  if (config.FACILITATOR_URL) return facilitatorSettlement(config.FACILITATOR_URL)
  return chain.hasWallet ? onchainSettlement(chain) : undefined
}
