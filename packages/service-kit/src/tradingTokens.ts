// The chain's token list as the trading service serves it (what its quotes and swaps accept),
// cached, with lookup by symbol or address: for services that take tokens from their clients.
import type { Endpoint, TokenList } from '@ats/contracts'
import type { NatsConnection } from 'nats'
import { cachedLoader } from './cache.ts'
import { callEndpoint } from './rpc.ts'

export type ListedToken = TokenList['tokens'][number]

/** Names people use for the wrapped tokens. */
const aliases: Record<string, string> = { eth: 'weth', btc: 'wbtc' }

/** The token a symbol (any case; ETH and BTC for the wrapped ones) or an address names in `list`, else undefined. */
export function findToken<T extends { symbol: string; address: string }>(list: readonly T[], ref: string): T | undefined {
  const wanted = ref.toLowerCase()
  return (
    list.find((t) => t.symbol.toLowerCase() === wanted || t.address.toLowerCase() === wanted) ??
    list.find((t) => t.symbol.toLowerCase() === aliases[wanted])
  )
}

export function tradingTokens(nc: NatsConnection, endpoint: Endpoint<object, TokenList>, { timeoutMs = 5_000, ttlMs = 600_000 } = {}) {
  const cache = cachedLoader({ max: 1, ttlMs, load: async () => (await callEndpoint(nc, endpoint, {}, { timeoutMs })).tokens })
  const list = () => cache.get('all')
  return {
    /** every token; rejects when trading cannot be asked */
    list,
    /** findToken over the list */
    find: async (ref: string): Promise<ListedToken | undefined> => findToken(await list(), ref),
  }
}
export type TradingTokens = ReturnType<typeof tradingTokens>
