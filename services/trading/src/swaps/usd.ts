import { formatUnits } from 'viem'
import type { Token } from '@ats/chain'
import { NoRoute, type Quoter, type RoutedQuote } from './quotes.ts'

/** Tokens valued at one dollar each when pricing a swap for the spend policy. */
const USD_STABLES = new Set(['USDC', 'USDC.E', 'USDT', 'DAI'])

export const isStable = (token: Token) => USD_STABLES.has(token.symbol.toUpperCase())

const dollars = (amount: bigint, decimals: number) => Number(formatUnits(amount, decimals))

/**
 * The USD value of a swap, from the quote's own prices: the stablecoin side when there is one
 * (the amount sold, else the amount bought), else tokenIn valued in USDC at the mid price of
 * its route on the same DEX at the same block (then on the other DEX). Undefined when neither
 * has a route to USDC.
 */
export async function usdValueOf(q: RoutedQuote, quoter: Quoter): Promise<number | undefined> {
  if (isStable(q.tokenIn)) return dollars(q.amountIn, q.tokenIn.decimals)
  if (isStable(q.tokenOut)) return dollars(q.amountOut, q.tokenOut.decimals)
  const dexes = q.dex.name === 'uniswap' ? (['uniswap', 'camelot'] as const) : (['camelot', 'uniswap'] as const)
  for (const dex of dexes) {
    try {
      // valued at the mid price, so a route too thin for the whole amount still prices it
      const inUsdc = await quoter.quoteAt({ tokenIn: q.tokenIn.address, tokenOut: 'USDC', amountIn: q.amountIn.toString(), dex }, q.blockNumber, { partial: true })
      return dollars(inUsdc.spotAmountOut, inUsdc.tokenOut.decimals)
    } catch (error) {
      if (!(error instanceof NoRoute)) throw error
    }
  }
  return undefined
}

export const formatUsd = (value: number) => `$${value.toFixed(2)}`
