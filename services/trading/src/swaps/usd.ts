import { formatUnits } from 'viem'
import type { Token } from '@ats/chain'
import { dexes } from '@ats/contracts'
import { NoRoute } from '../errors.ts'
import type { Quoter, RoutedQuote } from './quotes.ts'
import type { TokenResolver } from './tokens.ts'

/** The address book's tokens valued at one dollar each (by their address-book entry: a contract calling itself "USDC" is not one). */
const USD_STABLES = new Set(['USDC', 'USDC.E', 'USDT', 'DAI'])

const dollars = (amount: bigint, decimals: number) => Number(formatUnits(amount, decimals))

/**
 * What `amount` of `token` is worth in USD by a reference, never by the token's own word nor by
 * the pool a swap trades in alone: undefined for a token outside the address book (no trusted
 * price); an address-book stablecoin at $1; any other address-book token at the mid price of its
 * best route to the address book's USDC (direct, or through WETH: address-book tokens only) on
 * each DEX at the block, the higher of the two. Moving that value down takes moving every such
 * route, the deepest pools included (docs/trading.md "Valuing a swap").
 */
export async function referenceUsd(
  token: Token,
  amount: bigint,
  quoter: Quoter,
  tokens: TokenResolver,
  blockNumber: bigint,
): Promise<number | undefined> {
  const listed = tokens.listed(token)
  if (!listed) return undefined
  if (USD_STABLES.has(listed.symbol.toUpperCase())) return dollars(amount, listed.decimals)
  let best: number | undefined
  for (const dex of dexes) {
    try {
      // the mid price, so a route too thin for the whole amount still prices it
      const inUsdc = await quoter.quoteAt({ tokenIn: listed.address, tokenOut: 'USDC', amountIn: amount.toString(), dex }, blockNumber, {
        partial: true,
      })
      const value = dollars(inUsdc.spotAmountOut, inUsdc.tokenOut.decimals)
      if (best === undefined || value > best) best = value
    } catch (error) {
      if (!(error instanceof NoRoute)) throw error
    }
  }
  return best
}

/** The USD value of a swap: what it spends, tokenIn, at its reference value (undefined when it has none). */
export const usdValueOf = (q: RoutedQuote, quoter: Quoter, tokens: TokenResolver) =>
  referenceUsd(q.tokenIn, q.amountIn, quoter, tokens, q.blockNumber)

/** The USD value of `wei` of gas: ether at WETH's reference value. */
export const gasUsdOf = (wei: bigint, quoter: Quoter, tokens: TokenResolver, blockNumber: bigint) =>
  wei === 0n ? Promise.resolve(0) : referenceUsd(tokens.weth(), wei, quoter, tokens, blockNumber)

export const formatUsd = (value: number) => `$${value.toFixed(2)}`
