// The market-data service: the choice of each source (settings.ts), their shared cache, and the wiring to its NATS endpoints and routes.
import { fileURLToPath } from 'node:url'
import { marketContract } from '@ats/contracts'
import {
  addNatsService,
  createHttpClient,
  createSharedCache,
  startWorkerLoop,
  StartupError,
  type ServiceDefinition,
  packageVersion,
} from '@ats/service-kit'
import { getAddress, isAddress, type Address } from 'viem'
import { PrismaClient } from './generated/prisma/client.ts'
import { modelBridge } from './local/bridge.ts'
import { logNfts } from './local/nfts.ts'
import { devnetPools } from './local/pools.ts'
import { catalogPredictions, loadCatalog } from './local/predictions.ts'
import { poolPrices } from './local/prices.ts'
import { poolTrending, swapIndexer } from './local/trending.ts'
import { cachedPrices, createMarket } from './market.ts'
import { serveMarketEndpoints } from './nats/market.ts'
import { alchemyNfts } from './providers/alchemy.ts'
import { coingeckoPrices } from './providers/coingecko.ts'
import { geckoTerminalTrending } from './providers/geckoterminal.ts'
import { lifiBridge } from './providers/lifi.ts'
import { polymarketPredictions } from './providers/polymarket.ts'
import type { BridgeSource, NftSource, PredictionSource, PriceSource, TrendingSource } from './providers/types.ts'
import { marketRoutes } from './routes/market.ts'
import { marketDataSettings } from './settings.ts'

const schema = 'market_data'

export const marketDataService: ServiceDefinition<typeof marketDataSettings, PrismaClient, 'read'> = {
  name: 'market-data',
  version: packageVersion(import.meta.url),
  port: 3003,
  // the local sources read the chain (pools, Swap and Transfer logs); the wallet is never needed
  chain: 'read',
  // the cache of prices and trending pools is shared by every replica; without Redis each caches alone
  redis: 'optional',
  settings: marketDataSettings,
  database: {
    schema,
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { db, nc, redis, channels, config, version, onClose, chain, log }) {
    const upstream = (name: string, baseUrl: string, headers?: Record<string, string>) => {
      const http = createHttpClient({
        name,
        baseUrl,
        timeoutMs: config.SOURCE_TIMEOUT_MS,
        attemptTimeoutMs: Math.ceil(config.SOURCE_TIMEOUT_MS / 2),
        retries: 1,
        log,
        ...(headers ? { headers } : {}),
      })
      onClose(() => http.close())
      return http
    }
    const client = chain.publicClient
    const book = chain.addressBook
    const pools = devnetPools(client, book)
    const poolNames = () => [...Object.keys(book().uniswapV3.pools ?? {}), ...Object.keys(book().algebra.pools ?? {})]
    if ((config.PRICE_SOURCE === 'pools' || config.TRENDING_SOURCE === 'pools') && poolNames().length === 0) {
      throw new StartupError(
        `PRICE_SOURCE=pools and TRENDING_SOURCE=pools read the pools of the address book, and chain ${chain.chainId}'s has none (only the devnet's does): set PRICE_SOURCE=coingecko and TRENDING_SOURCE=geckoterminal`,
      )
    }

    let prices: PriceSource
    if (config.PRICE_SOURCE === 'coingecko') {
      const pro = config.COINGECKO_URL.includes('pro-api')
      const headers = config.COINGECKO_API_KEY ? { [pro ? 'x-cg-pro-api-key' : 'x-cg-demo-api-key']: config.COINGECKO_API_KEY } : undefined
      prices = coingeckoPrices(upstream('coingecko', config.COINGECKO_URL, headers))
    } else {
      const local = poolPrices({ db, pools, log })
      prices = local
      const sampler = startWorkerLoop({
        name: 'price-sampler',
        log,
        idleMs: config.PRICE_SAMPLE_INTERVAL_MS,
        round: async () => {
          await local.record(config.PRICE_SAMPLE_INTERVAL_MS)
          return false
        },
      })
      onClose(sampler.stop)
    }

    let trending: TrendingSource
    if (config.TRENDING_SOURCE === 'geckoterminal') {
      trending = geckoTerminalTrending(upstream('geckoterminal', config.GECKOTERMINAL_URL), { network: config.GECKOTERMINAL_NETWORK })
    } else {
      const indexer = swapIndexer({ db, client, pools, chainId: chain.chainId, log })
      const loop = startWorkerLoop({ name: 'swap-indexer', log, idleMs: config.SWAP_INDEX_INTERVAL_MS, round: () => indexer.round() })
      onClose(loop.stop)
      trending = poolTrending({ db, pools, chainId: chain.chainId, log })
    }

    let nfts: NftSource
    if (config.NFT_SOURCE === 'alchemy') {
      if (!config.ALCHEMY_API_KEY) throw new StartupError('NFT_SOURCE=alchemy needs ALCHEMY_API_KEY')
      nfts = alchemyNfts(upstream('alchemy', `${config.ALCHEMY_NFT_URL.replace(/\/+$/, '')}/${encodeURIComponent(config.ALCHEMY_API_KEY)}`))
    } else {
      const spam = config.NFT_SPAM_CONTRACTS.split(',')
        .map((s) => s.trim())
        .filter(Boolean)
      const bad = spam.find((address) => !isAddress(address))
      if (bad) throw new StartupError(`NFT_SPAM_CONTRACTS: ${bad} is not an address`)
      nfts = logNfts({ client, book, extraSpam: spam.map((a) => getAddress(a) as Address) })
    }

    let predictions: PredictionSource
    if (config.PREDICTION_SOURCE === 'polymarket') {
      predictions = polymarketPredictions(upstream('polymarket', config.POLYMARKET_GAMMA_URL))
    } else {
      await loadCatalog(db, log)
      predictions = catalogPredictions(db)
    }

    const cache = createSharedCache({ redis, prefix: `${config.NATS_NAMESPACE}:market-data`, log, lockMs: config.SOURCE_TIMEOUT_MS * 2 })
    let bridge: BridgeSource
    if (config.BRIDGE_SOURCE === 'lifi') {
      bridge = lifiBridge(upstream('lifi', config.LIFI_URL, config.LIFI_API_KEY ? { 'x-lifi-api-key': config.LIFI_API_KEY } : undefined))
    } else {
      bridge = modelBridge({ prices: cachedPrices(prices, cache, config.MARKET_CACHE_TTL_MS).source, book, chainId: chain.chainId })
    }

    if (!redis)
      log.warn('REDIS_URL is not set: each replica caches prices and trending pools on its own (one upstream call per replica per ttl)')
    log.info(
      { prices: prices.name, trending: trending.name, nfts: nfts.name, predictions: predictions.name, bridge: bridge.name },
      'market sources',
    )
    const market = createMarket({ sources: { prices, trending, nfts, predictions, bridge }, cache, ttlMs: config.MARKET_CACHE_TTL_MS })

    const nats = await addNatsService(nc, marketContract.name, version, 'prices, trending pools, NFTs, prediction markets, bridge quotes')
    onClose(() => nats.stop().then(() => undefined))
    serveMarketEndpoints(nats, { channels, log, market })

    await app.register(marketRoutes, { market })
  },
}
