import { Type, type Static } from 'typebox'
import { ErrorBody, upstreamRouteErrors } from '../common/errors.ts'
import { Address, Bytes32, EpochMs, IntegerString, addressPattern } from '../common/primitives.ts'
import { route } from '../common/route.ts'

/**
 * The seven core assets of GET /market/prices, by the symbol clients know them by. ETH and
 * BTC are priced as WETH and WBTC on chain; CoinGecko's ids are in the service.
 */
export const coreAssets = ['ETH', 'BTC', 'USDC', 'USDT', 'ARB', 'GMX', 'LINK'] as const
export type CoreAsset = (typeof coreAssets)[number]

/** A decimal number as a string, as GeckoTerminal sends them (keeps the upstream's precision). */
const DecimalString = (description: string) => Type.String({ pattern: '^-?[0-9]+(\\.[0-9]+)?$', description })

export const PriceEntry = Type.Object({
  price: Type.Number({ description: 'USD per whole token' }),
  change24h: Type.Number({ description: 'percent change over the last 24 hours (-1.5 = down 1.5%)' }),
  updatedAt: Type.Optional(
    EpochMs("when the source itself last updated this price (CoinGecko's last_updated_at); absent: the answer's updatedAt"),
  ),
})
export type PriceEntry = Static<typeof PriceEntry>

const Cached = Type.Boolean({ description: 'true when this answer was served from the shared cache, false when it was just fetched' })
const UpdatedAt = EpochMs('when the answer was fetched from its source (ms since the Unix epoch)')

export const Prices = Type.Object({
  prices: Type.Record(Type.String(), PriceEntry, { description: `by symbol: ${coreAssets.join(', ')}` }),
  cached: Cached,
  updatedAt: UpdatedAt,
})
export type Prices = Static<typeof Prices>

export const TrendingPool = Type.Object({
  name: Type.String({ description: 'the pair and fee tier, e.g. "WETH / USDC 0.05%"' }),
  basePrice: DecimalString('USD per whole base token (the first of the pair)'),
  volume24h: DecimalString('USD traded through the pool in the last 24 hours'),
  change24h: DecimalString("percent change of the base token's price in this pool over 24 hours"),
  address: Address({ description: 'the pool' }),
  dex: Type.String({ description: 'the DEX: uniswap, camelot (GeckoTerminal: its dex id, e.g. uniswap_v3_arbitrum)' }),
})
export type TrendingPool = Static<typeof TrendingPool>

export const trendingLimit = 10

export const Trending = Type.Object({
  trending: Type.Array(TrendingPool, { maxItems: trendingLimit, description: 'by 24h volume, highest first' }),
  cached: Cached,
  updatedAt: UpdatedAt,
})
export type Trending = Static<typeof Trending>

export const Nft = Type.Object({
  contractAddress: Address(),
  tokenId: IntegerString(),
  name: Type.String({ description: "the token's name, else the collection's name and the token id" }),
  collection: Type.String({ description: "the collection's name" }),
  imageUrl: Type.String({ description: 'the image (or, when the source has no image, the metadata URI); "" when none' }),
  isSpam: Type.Boolean({ description: 'the collection is flagged as spam; such NFTs are listed only with includeHidden=true' }),
})
export type Nft = Static<typeof Nft>

export const NftsParams = Type.Object({ address: Address({ description: 'the owner' }) })
export const NftsQuery = Type.Object({
  includeHidden: Type.Boolean({ default: false, description: 'also list spam (hidden) NFTs' }),
  pageKey: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: 'the pageKey of the previous page' })),
})
export const Nfts = Type.Object({
  nfts: Type.Array(Nft),
  pageKey: Type.Optional(Type.String({ description: 'present when there are more: pass it as ?pageKey= for the next page' })),
})
export type Nfts = Static<typeof Nfts>

export const PredictionOutcome = Type.Object({
  name: Type.String({ description: 'e.g. "Yes"' }),
  price: Type.Number({
    minimum: 0,
    maximum: 1,
    description: "the outcome share's last price in USD (0..1), the market's implied probability",
  }),
})

export const PredictionMarket = Type.Object({
  conditionId: Bytes32({ description: 'the CTF condition id: GET /predictions/:conditionId' }),
  question: Type.String(),
  slug: Type.String(),
  description: Type.String(),
  outcomes: Type.Array(PredictionOutcome),
  volume: Type.Number({ description: 'USD traded, all time' }),
  liquidity: Type.Number({ description: 'USD in the order book' }),
  endDate: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
    description: 'when the market resolves (ISO 8601), null when open-ended',
  }),
  active: Type.Boolean(),
  closed: Type.Boolean(),
  url: Type.String({ description: "the market's page" }),
})
export type PredictionMarket = Static<typeof PredictionMarket>

export const predictionsDefaultLimit = 10
const PredictionLimit = Type.Integer({
  minimum: 1,
  maximum: 100,
  default: predictionsDefaultLimit,
  description: 'how many markets (1..100)',
})

export const TopPredictionsQuery = Type.Object({ limit: PredictionLimit })
export const SearchPredictionsQuery = Type.Object({
  q: Type.String({ minLength: 1, maxLength: 200, description: 'words to look for in the question and description' }),
  limit: PredictionLimit,
})
export const ConditionParams = Type.Object({ conditionId: Bytes32({ description: 'the condition id of one market' }) })
export const PredictionMarkets = Type.Object({ markets: Type.Array(PredictionMarket) })
export type PredictionMarkets = Static<typeof PredictionMarkets>
export const OnePrediction = Type.Object({ market: PredictionMarket })

/** Arbitrum One: the service's own chain, the default source of a bridge. */
export const defaultBridgeFromChainId = 42161

const ChainId = (description: string) => Type.Integer({ minimum: 1, description })
const BridgeTokenRef = (description: string) =>
  Type.String({ pattern: `${addressPattern.slice(0, -1)}|^[A-Za-z][A-Za-z0-9.]{0,15}$`, description })

export const BridgeQuoteQuery = Type.Object({
  fromChainId: Type.Integer({
    minimum: 1,
    default: defaultBridgeFromChainId,
    description: 'the source chain (default 42161, Arbitrum One)',
  }),
  toChainId: ChainId('the destination chain: one of GET /bridge/chains'),
  fromToken: BridgeTokenRef(
    'the token sent, on fromChainId: its address (0x0000000000000000000000000000000000000000 for the native coin) or symbol (USDC, ETH …)',
  ),
  toToken: BridgeTokenRef('the token received, on toChainId: its address or symbol'),
  amount: Type.String({ minLength: 1, maxLength: 80, description: 'fromToken base units, a positive integer string' }),
  userAddress: Address({ description: 'who sends on fromChainId and receives on toChainId' }),
  slippageBps: Type.Integer({
    minimum: 0,
    maximum: 5000,
    default: 50,
    description: 'the most toAmountMin may fall below toAmount, in basis points',
  }),
})

export const BridgeToken = Type.Object({
  chainId: Type.Integer(),
  address: Address(),
  symbol: Type.String(),
  decimals: Type.Integer({ minimum: 0, maximum: 255 }),
  priceUsd: Type.Optional(Type.Number({ description: 'USD per whole token, when known' })),
})
export type BridgeToken = Static<typeof BridgeToken>

export const BridgeCost = Type.Object({
  name: Type.String({ description: 'e.g. "bridge fee", "gas on the source chain"' }),
  amountUsd: DecimalString('in USD'),
})

export const BridgeQuote = Type.Object({
  id: Type.String({ description: "the quote's id at its source" }),
  source: Type.String({ description: 'lifi, or model (the offline quote model, docs/market-data.md)' }),
  tool: Type.String({ description: 'the bridge that would carry it, e.g. across, stargate' }),
  fromChainId: Type.Integer(),
  toChainId: Type.Integer(),
  fromToken: BridgeToken,
  toToken: BridgeToken,
  fromAmount: IntegerString({ description: 'fromToken base units' }),
  toAmount: IntegerString({ description: 'toToken base units expected' }),
  toAmountMin: IntegerString({ description: 'toToken base units at least, after slippage' }),
  estimatedDurationSeconds: Type.Integer({ minimum: 0 }),
  feeCosts: Type.Array(BridgeCost, { description: 'fees taken from the amount' }),
  gasCosts: Type.Array(BridgeCost, { description: 'gas paid by the sender' }),
  transactionRequest: Type.Optional(
    Type.Object(
      {
        to: Address(),
        data: Type.String({ pattern: '^0x[0-9a-fA-F]*$' }),
        value: IntegerString({ description: 'wei' }),
        gasLimit: Type.Optional(IntegerString()),
        chainId: Type.Integer(),
      },
      { description: 'the unsigned transaction userAddress signs on fromChainId (LI.FI only; the offline model has none)' },
    ),
  ),
})
export type BridgeQuote = Static<typeof BridgeQuote>

export const BridgeChain = Type.Object({
  id: Type.Integer({ description: 'the chain id' }),
  key: Type.String({ description: 'a short name, e.g. arb' }),
  name: Type.String(),
  nativeToken: Type.Object({ address: Address(), symbol: Type.String(), decimals: Type.Integer() }),
})
export type BridgeChain = Static<typeof BridgeChain>
export const BridgeChains = Type.Object({ chains: Type.Array(BridgeChain) })
export type BridgeChains = Static<typeof BridgeChains>

export const marketRoutes = {
  prices: route({
    method: 'GET',
    url: '/market/prices',
    summary: `USD prices and 24h change of the seven core assets (${coreAssets.join(', ')}), cached 30 s`,
    schema: { response: { 200: Prices, ...upstreamRouteErrors } },
  }),
  trending: route({
    method: 'GET',
    url: '/market/trending',
    summary: 'Up to 10 trending pools on Arbitrum by 24h volume, cached 30 s',
    schema: { response: { 200: Trending, ...upstreamRouteErrors } },
  }),
  nfts: route({
    method: 'GET',
    url: '/nfts/:address',
    summary: 'NFTs an address owns; spam collections are hidden unless includeHidden=true',
    schema: { params: NftsParams, querystring: NftsQuery, response: { 200: Nfts, ...upstreamRouteErrors } },
  }),
  topPredictions: route({
    method: 'GET',
    url: '/predictions/top',
    summary: 'Open prediction markets with the most volume',
    schema: { querystring: TopPredictionsQuery, response: { 200: PredictionMarkets, ...upstreamRouteErrors } },
  }),
  searchPredictions: route({
    method: 'GET',
    url: '/predictions/search',
    summary: 'Prediction markets whose question or description matches q, best match first',
    schema: { querystring: SearchPredictionsQuery, response: { 200: PredictionMarkets, ...upstreamRouteErrors } },
  }),
  prediction: route({
    method: 'GET',
    url: '/predictions/:conditionId',
    summary: 'One prediction market by its condition id',
    schema: { params: ConditionParams, response: { 200: OnePrediction, 404: ErrorBody, ...upstreamRouteErrors } },
  }),
  bridgeQuote: route({
    method: 'GET',
    url: '/bridge/quote',
    summary: 'A quote to bridge a token from one chain to another (fromChainId defaults to 42161)',
    schema: { querystring: BridgeQuoteQuery, response: { 200: BridgeQuote, 422: ErrorBody, ...upstreamRouteErrors } },
  }),
  bridgeChains: route({
    method: 'GET',
    url: '/bridge/chains',
    summary: 'The chains a bridge quote can go between',
    schema: { response: { 200: BridgeChains, ...upstreamRouteErrors } },
  }),
}
