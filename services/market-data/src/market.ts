// What every route and NATS endpoint of market-data answers: sources behind the shared cache, defaults applied.
import {
  defaultBridgeFromChainId,
  predictionsDefaultLimit,
  trendingLimit,
  type BridgeChains,
  type BridgeQuote,
  type BridgeQuoteRequest,
  type Nfts,
  type PredictionMarkets,
  type Prices,
  type Trending,
} from '@ats/contracts'
import { parseAmount } from '@ats/chain'
import { BadRequest, NotFound, type SharedCache } from '@ats/service-kit'
import type { Address } from 'viem'
import type { BridgeSource, NftSource, PredictionSource, PriceSource, TrendingSource } from './providers/types.ts'

export interface MarketSources {
  prices: PriceSource
  trending: TrendingSource
  nfts: NftSource
  predictions: PredictionSource
  bridge: BridgeSource
}

/** Chains change with bridge releases, not by the minute. */
const CHAINS_TTL_MS = 3600_000
const defaultSlippageBps = 50

/**
 * A price source behind the shared cache: GET /market/prices answers from it, and the bridge
 * model values amounts with it, so a bridge quote reads no pools (or CoinGecko) of its own.
 */
export function cachedPrices(source: PriceSource, cache: SharedCache, ttlMs: number) {
  const read = () => cache.get(`prices:${source.name}`, ttlMs, () => source.prices())
  const cachedSource: PriceSource = { name: source.name, prices: async () => (await read()).value }
  return { read, source: cachedSource }
}

export function createMarket({ sources, cache, ttlMs }: { sources: MarketSources; cache: SharedCache; ttlMs: number }) {
  const prices = cachedPrices(sources.prices, cache, ttlMs)
  return {
    async prices(): Promise<Prices> {
      const { value, cached, storedAt } = await prices.read()
      return { prices: value, cached, updatedAt: storedAt }
    },

    async trending(): Promise<Trending> {
      const { value, cached, storedAt } = await cache.get(`trending:${sources.trending.name}`, ttlMs, () =>
        sources.trending.trending(trendingLimit),
      )
      return { trending: value.slice(0, trendingLimit), cached, updatedAt: storedAt }
    },

    async nfts(owner: Address, { includeHidden, pageKey }: { includeHidden: boolean; pageKey?: string | undefined }): Promise<Nfts> {
      const page = await sources.nfts.nftsOf(owner, pageKey ? { pageKey } : {})
      const nfts = includeHidden ? page.nfts : page.nfts.filter((nft) => !nft.isSpam)
      return page.pageKey ? { nfts, pageKey: page.pageKey } : { nfts }
    },

    async topPredictions(limit = predictionsDefaultLimit): Promise<PredictionMarkets> {
      return { markets: await sources.predictions.top(limit) }
    },

    async searchPredictions(q: string, limit = predictionsDefaultLimit): Promise<PredictionMarkets> {
      const words = q.trim()
      if (!words) throw new BadRequest('q must have something to search for')
      return { markets: await sources.predictions.search(words, limit) }
    },

    async prediction(conditionId: string) {
      const market = await sources.predictions.market(conditionId)
      if (!market) throw new NotFound(`prediction market ${conditionId}`)
      return { market }
    },

    async bridgeQuote(request: BridgeQuoteRequest): Promise<BridgeQuote> {
      return sources.bridge.quote({
        fromChainId: request.fromChainId ?? defaultBridgeFromChainId,
        toChainId: request.toChainId,
        fromToken: request.fromToken,
        toToken: request.toToken,
        amount: parseAmount('amount', request.amount),
        userAddress: request.userAddress as Address,
        slippageBps: request.slippageBps ?? defaultSlippageBps,
      })
    },

    async bridgeChains(): Promise<BridgeChains> {
      const { value } = await cache.get(`bridge-chains:${sources.bridge.name}`, CHAINS_TTL_MS, () => sources.bridge.chains())
      return { chains: value }
    },
  }
}

export type Market = ReturnType<typeof createMarket>
