// Here, beside TokenList, not in the kit: the caller passes the loader (the kit's cachedLoader over
// callEndpoint on channels.trading.tokens), so neither NATS nor a cache of its own here.
// The chain's token list as the trading service serves it (what its quotes and swaps accept),
// with lookup by symbol or address: for services that take tokens from their clients.
import type { TokenList } from './nats.ts'

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

/**
 * Lookup over the list `load` answers. Keeping it is the caller's: pass the kit's cachedLoader
 * (the one cache of the fleet), so that a lookup costs no call to trading while the list is fresh.
 */
export function tradingTokens(load: () => Promise<TokenList>) {
  const list = async (): Promise<ListedToken[]> => (await load()).tokens
  return {
    /** every token; rejects when the loader does */
    list,
    /** findToken over the list */
    find: async (ref: string): Promise<ListedToken | undefined> => findToken(await list(), ref),
  }
}
export type TradingTokens = ReturnType<typeof tradingTokens>
