// The trading service: the wiring of its quoter, executor, approvals, launchpad and positions to its NATS endpoints and routes.
import { fileURLToPath } from 'node:url'
import { tradingContract } from '@ats/contracts'
import {
  Forbidden,
  addNatsService,
  callEndpoint,
  createIdempotencyStore,
  startEventOutbox,
  startIdempotencyPurge,
  type ServiceDefinition,
  packageVersion,
} from '@ats/service-kit'
import { watchWalletControl } from '@ats/wallet'
import { getAddress, type Address, type Hex } from 'viem'
import { createApprovalStore } from './approvals/approvals.ts'
import { createDecisions } from './approvals/decisions.ts'
import { createGrants } from './grants/grants.ts'
import { chainTx } from './chainTx.ts'
import { camelotDex } from './dex/camelot.ts'
import { uniswapDex } from './dex/uniswap.ts'
import { PrismaClient } from './generated/prisma/client.ts'
import { createLaunchpad } from './launchpad/launchpad.ts'
import { serveTradingEndpoints } from './nats/trading.ts'
import { createPositions } from './positions/positions.ts'
import { approvalsRoutes } from './routes/approvals.ts'
import { grantsRoutes } from './routes/grants.ts'
import { launchpadRoutes } from './routes/launchpad.ts'
import { portfolioRoutes } from './routes/portfolio.ts'
import { swapRoutes } from './routes/swap.ts'
import { tradingSettings } from './settings.ts'
import { createExecutionStore } from './swaps/executions.ts'
import { createExecutor } from './swaps/executor.ts'
import { swapCounter } from './swaps/metrics.ts'
import { hasUsdLimit, type SpendDefaults, type SpendLimits } from './swaps/policy.ts'
import { createPreparer } from './swaps/prepare.ts'
import { createQuoter } from './swaps/quotes.ts'
import { tokenResolver } from './swaps/tokens.ts'
import { gasUsdOf } from './swaps/usd.ts'

const schema = 'trading'

export const tradingService: ServiceDefinition<typeof tradingSettings, PrismaClient, 'write'> = {
  name: 'trading',
  version: packageVersion(import.meta.url),
  port: 3002,
  // swaps, approvals and launches are sent from the server wallet (SERVER_WALLET_PRIVATE_KEY)
  chain: 'write',
  settings: tradingSettings,
  database: {
    schema,
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { db, nc, channels, config, version, onClose, chain, log, metrics }) {
    const client = chain.publicClient
    const book = chain.addressBook()
    const tokens = tokenResolver(client, chain.tokens)
    const dexes = { uniswap: uniswapDex(client, book.uniswapV3), camelot: camelotDex(client, book.algebra) }
    const quoter = createQuoter({ client, dexes, tokens, blockCacheMs: config.QUOTE_BLOCK_CACHE_MS })
    // the kill switch, watched into memory: every send from the server wallet checks it
    const walletControl = await watchWalletControl(nc, channels.admin.walletControl, log)
    onClose(walletControl.close)
    const tx = chainTx({ chain, receiptTimeoutMs: config.RECEIPT_TIMEOUT_MS, receiptPollMs: config.RECEIPT_POLL_MS, walletControl })

    const idempotency = await createIdempotencyStore(config.DATABASE_URL!, {
      schema,
      log,
      leaseMs: Math.max(60_000, config.RECEIPT_TIMEOUT_MS * 2),
    })
    onClose(() => idempotency.close())
    onClose(startIdempotencyPurge(idempotency, log, 24 * 3600_000).stop)
    // swap.confirmed is written with the mined swap, published from here (docs/webhooks.md)
    const events = await startEventOutbox({ nc, channels: channels.admin.events, databaseUrl: config.DATABASE_URL!, schema, log })
    onClose(() => events.stop())
    const approvals = createApprovalStore({ db, ttlMs: config.APPROVAL_TTL_MS, log, publicUrl: config.TRADING_PUBLIC_URL })

    const serverWallet: SpendLimits = {
      owner: 'the server wallet',
      maxUsdPerSwap: config.SPEND_MAX_USD_PER_SWAP,
      maxUsdPerDay: config.SPEND_MAX_USD_PER_DAY,
      walletWide: true,
    }
    const walletLimits = hasUsdLimit(serverWallet) ? serverWallet : undefined
    const defaults: SpendDefaults = {
      maxUsdPerSwap: config.SPEND_UNLIMITED ? undefined : config.SPEND_DEFAULT_USD_PER_SWAP,
      maxUsdPerDay: config.SPEND_UNLIMITED ? undefined : config.SPEND_DEFAULT_USD_PER_DAY,
      maxPriceImpactBps: config.SPEND_DEFAULT_MAX_PRICE_IMPACT_BPS,
      maxLaunchesPerDay: config.LAUNCH_DEFAULT_PER_DAY,
    }
    if (!chain.hasWallet)
      log.warn('SERVER_WALLET_PRIVATE_KEY is not set: quotes, prepare and positions (with ?address=) work; execute and launch answer 503')
    else if (config.SPEND_UNLIMITED) {
      log.warn(
        { walletWidePerSwap: config.SPEND_MAX_USD_PER_SWAP ?? 'none', walletWidePerDay: config.SPEND_MAX_USD_PER_DAY ?? 'none' },
        'SPEND_UNLIMITED=true: keys whose spend policy sets no USD cap may spend the server wallet without limit',
      )
    } else
      log.info(
        { perSwap: defaults.maxUsdPerSwap, perDay: defaults.maxUsdPerDay, maxPriceImpactBps: defaults.maxPriceImpactBps },
        'default spend limits of keys',
      )

    const executions = createExecutionStore(db, events)
    const grants = createGrants({
      chain,
      tokens,
      delegateKey: config.GRANT_DELEGATE_PRIVATE_KEY as Hex | undefined,
      contract: config.TRADE_GRANTS_ADDRESS as Address | undefined,
      fromBlock: BigInt(config.GRANTS_FROM_BLOCK),
      databaseUrl: config.DATABASE_URL,
      log,
    })
    if (grants.delegate)
      log.info({ delegate: grants.delegate, contract: grants.address }, 'swaps from users’ own wallets under their grants')
    // fail closed: without admin's answer no swap is made for a key
    const keyPolicy = async (keyId: string) => {
      const { key } = await callEndpoint(nc, channels.admin.keyPolicy, { keyId }, { timeoutMs: 2000 })
      if (!key) throw new Forbidden(`API key ${keyId} is revoked or unknown`)
      return { policy: key.policy, wallet: key.wallet }
    }
    const executor = createExecutor({
      executions,
      quoter,
      tokens,
      tx,
      idempotency,
      walletLimits,
      defaults,
      walletControl,
      deadlineSeconds: config.SWAP_DEADLINE_SECONDS,
      approvals,
      grants,
      counted: swapCounter(metrics),
      log,
      keyPolicy,
      payerPolicy: async (address) => {
        const { payer } = await callEndpoint(nc, channels.admin.agentPayer, { address: getAddress(address) }, { timeoutMs: 2000 })
        return payer?.policy ?? null
      },
    })
    const decisions = createDecisions({ db, store: approvals, executor, walletControl, log })
    // a crash between an approval and its swap is picked up within ~30 s; expiries within a second or so
    onClose(
      decisions.startSweeps({ everyMs: Math.min(5_000, Math.max(250, Math.floor(config.APPROVAL_TTL_MS / 4))), staleMs: 30_000 }).stop,
    )
    const prepare = createPreparer({ client, quoter, chainId: chain.chainId, deadlineSeconds: config.SWAP_DEADLINE_SECONDS })
    // a read needs the wallet's address only, not its sender
    const wallet = () => chain.wallet().account.address
    const positions = createPositions({
      client,
      book: chain.addressBook,
      quoter,
      tokens: (address) => chain.tokens().find(address),
      wallet,
    })
    const launchpad = createLaunchpad({
      db,
      tx,
      idempotency,
      chainId: chain.chainId,
      log,
      walletControl,
      limitsOf: (keyId) => executor.limitsFor({ keyId }),
      gasUsd: async (wei) => gasUsdOf(wei, quoter, tokens, await client.getBlockNumber({ cacheTime: 0 })),
    })

    const nats = await addNatsService(nc, tradingContract.name, version, 'swap quotes and execution, positions')
    onClose(() => nats.stop().then(() => undefined))
    const impactCeilingBps = config.SPEND_DEFAULT_MAX_PRICE_IMPACT_BPS
    serveTradingEndpoints(nats, { channels, log, chain, quoter, impactCeilingBps, executor, decisions, prepare, positions, grants })

    await app.register(swapRoutes, { quoter, executor, executions, prepare, impactCeilingBps })
    await app.register(approvalsRoutes, { store: approvals, decisions })
    await app.register(portfolioRoutes, { positions })
    await app.register(launchpadRoutes, { launchpad })
    await app.register(grantsRoutes, { grants, boundWallet: async (keyId) => (await keyPolicy(keyId)).wallet })
  },
}
