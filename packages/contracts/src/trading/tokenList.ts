// Here, beside TokenList, not in the kit: the caller passes the loader (callEndpoint on channels.trading.tokens), so no NATS here.
// The chain's token list as the trading service serves it (what its quotes and swaps accept),
// kept for a while, with lookup by symbol or address: for services that take tokens from their clients.
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

export interface TradingTokensOptions {
  /** how long one answer is used (10 minutes) */
  ttlMs?: number
  /** the clock, for tests */
  now?: () => number
}

/**
 * The list `load` answers, kept `ttlMs`: callers meanwhile share one load, and a failed load is
 * not kept (the next call asks again).
 */
export function tradingTokens(load: () => Promise<TokenList>, { ttlMs = 600_000, now = Date.now }: TradingTokensOptions = {}) {
  let kept: { tokens: Promise<ListedToken[]>; until: number } | undefined
  const list = (): Promise<ListedToken[]> => {
    if (!kept || now() >= kept.until) {
      const tokens = load().then((answer) => answer.tokens)
      const entry = { tokens, until: now() + ttlMs }
      kept = entry
      tokens.catch(() => {
        if (kept === entry) kept = undefined
      })
    }
    return kept.tokens
  }
  return {
    /** every token; rejects when the loader does */
    list,
    /** findToken over the list */
    find: async (ref: string): Promise<ListedToken | undefined> => findToken(await list(), ref),
  }
}
export type TradingTokens = ReturnType<typeof tradingTokens>
