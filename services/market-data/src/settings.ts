// The settings of market-data: where each kind of market data comes from, the public APIs' addresses and keys, caching and sampling.
import { httpUrlSetting, msSetting } from '@ats/service-kit'
import { Type } from 'typebox'

const source = <const T extends string[]>(values: T, description: string) =>
  Type.Unsafe<T[number]>({ type: 'string', enum: values, default: values[0], description })
const url = (value: string, description: string) => httpUrlSetting({ default: value, description })
const apiKey = (description: string) => Type.Optional(Type.String({ minLength: 1, secret: true, description }))

export const marketDataSettings = {
  PRICE_SOURCE: source(
    ['pools', 'coingecko'],
    "where /market/prices comes from: pools (the chain's own pools, the devnet's by default) or coingecko (CoinGecko's simple price)",
  ),
  TRENDING_SOURCE: source(
    ['pools', 'geckoterminal'],
    "where /market/trending comes from: pools (the devnet's pools by 24h volume of their Swap events) or geckoterminal (GeckoTerminal's trending pools)",
  ),
  NFT_SOURCE: source(
    ['logs', 'alchemy'],
    "where /nfts comes from: logs (ERC-721 Transfer logs of the address book's collections) or alchemy (Alchemy NFT API v3)",
  ),
  PREDICTION_SOURCE: source(
    ['catalog', 'polymarket'],
    "where /predictions comes from: catalog (the bundled catalog, searched in Postgres) or polymarket (Polymarket's Gamma API)",
  ),
  BRIDGE_SOURCE: source(
    ['model', 'lifi'],
    'where /bridge comes from: model (the offline quote model, docs/market-data.md) or lifi (LI.FI)',
  ),
  COINGECKO_URL: url('https://api.coingecko.com/api/v3', 'CoinGecko API base (https://pro-api.coingecko.com/api/v3 with a Pro key)'),
  COINGECKO_API_KEY: apiKey('CoinGecko API key: sent as x-cg-demo-api-key, or x-cg-pro-api-key when COINGECKO_URL is the Pro API'),
  GECKOTERMINAL_URL: url('https://api.geckoterminal.com/api/v2', 'GeckoTerminal API base'),
  GECKOTERMINAL_NETWORK: Type.String({
    pattern: '^[a-z0-9_-]+$',
    default: 'arbitrum',
    description: "GeckoTerminal's network id whose trending pools are listed",
  }),
  ALCHEMY_NFT_URL: url('https://arb-mainnet.g.alchemy.com/nft/v3', 'Alchemy NFT API v3 base, without the key'),
  ALCHEMY_API_KEY: apiKey('Alchemy API key (required with NFT_SOURCE=alchemy)'),
  POLYMARKET_GAMMA_URL: url('https://gamma-api.polymarket.com', "Polymarket's Gamma API base"),
  LIFI_URL: url('https://li.quest/v1', 'LI.FI API base'),
  LIFI_API_KEY: apiKey('LI.FI API key (optional: sent as x-lifi-api-key for higher rate limits)'),
  SOURCE_TIMEOUT_MS: msSetting('the most a call to a public API may take, retries included, before the route answers 503', 5000),
  MARKET_CACHE_TTL_MS: msSetting('how long prices and trending pools are served from the cache shared by all replicas (Redis)', 30_000, 1),
  PRICE_SAMPLE_INTERVAL_MS: msSetting(
    'pools source: how often prices are recorded to the price history that change24h is computed from',
    300_000,
    1000,
  ),
  SWAP_INDEX_INTERVAL_MS: msSetting("pools source: how often new blocks' Swap events are indexed", 2000),
  NFT_SPAM_CONTRACTS: Type.String({
    default: '',
    description: "logs source: comma-separated collection addresses to flag as spam, besides the address book's",
  }),
}
