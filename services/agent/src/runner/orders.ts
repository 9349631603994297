// The agent's side of the automation service's orders (twap, stop-loss, take-profit, trailing
// stop): what a share of a balance comes to, and an automation of any type in plain words (what
// it trades, a stop order's levels, a TWAP's progress) for the tools' outputs and the answers;
// USD amounts in words too, for those and the planner's answers.
import type { Automation } from '@ats/contracts'

/** $3,012.45; below $1 four significant decimals ($0.0001234 → $0.0001234). */
export function formatUsd(value: number): string {
  if (value >= 1 || value === 0) return `$${value.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`
  return `$${value.toPrecision(4).replace(/0+$/, '')}`
}

export const orderTypes = ['twap', 'stop-loss', 'take-profit', 'trailing-stop'] as const
export type OrderType = (typeof orderTypes)[number]

/** How an answer names each type. */
export const typeLabels: Record<string, string> = {
  'recurring-buy': 'recurring buy',
  'limit-order': 'limit order',
  twap: 'TWAP',
  'stop-loss': 'stop-loss',
  'take-profit': 'take-profit',
  'trailing-stop': 'trailing stop',
}

/** The asset market-data prices a token as: WETH as ETH, WBTC as BTC. */
export const pricedAs = (symbol: string) => ({ WETH: 'ETH', WBTC: 'BTC' })[symbol] ?? symbol

/** `percent` (0 < percent ≤ 100, to two decimals) of `balance`, rounded down: 50 of 3 base units is 1. */
export function shareOf(balance: bigint, percent: number): bigint {
  const bps = Math.round(percent * 100)
  if (!(bps > 0 && bps <= 10_000)) throw new RangeError(`a share of a balance is above 0% and at most 100%, got ${percent}%`)
  return (balance * BigInt(bps)) / 10_000n
}

/** "1.5 WETH" from a symbol and base units. */
export type AmountText = (symbol: string, units: string) => Promise<string>

interface Terms {
  tokenIn: string
  tokenOut: string
  amount: string
  interval?: string
  minAmountOut?: string
  duration?: string
  slices?: number
  stopPrice?: number
  takeProfitPrice?: number
  trailPercent?: number
  trailAmount?: number
}
interface Seen {
  price?: number
  highestPrice?: number
  stopPrice?: number
  slicesDone?: number
  filled?: string
}

/**
 * What an automation does, in words starting with a verb: "sells 0.5 WETH for USDC when ETH is
 * at or below $2,500.00 (ETH last $3,012.45)". What it has seen (its state) is added when known.
 */
export async function summaryOf(a: Pick<Automation, 'type' | 'config' | 'state'>, amountText: AmountText): Promise<string> {
  const c = a.config as unknown as Terms
  const seen = (a.state ?? {}) as Seen
  const amount = await amountText(c.tokenIn, c.amount)
  const asset = pricedAs(c.tokenIn)
  // what a stop order has seen: its last price; a trailing stop's highest and the stop under it
  const seenWords = [
    ...(seen.price === undefined ? [] : [`${asset} last ${formatUsd(seen.price)}`]),
    ...(seen.highestPrice === undefined ? [] : [`highest ${formatUsd(seen.highestPrice)}`]),
    ...(seen.stopPrice === undefined ? [] : [`stop now at ${formatUsd(seen.stopPrice)}`]),
  ]
  const seenText = seenWords.length === 0 ? '' : ` (${seenWords.join(', ')})`
  const takeProfit = c.takeProfitPrice === undefined ? [] : [`at or above ${formatUsd(c.takeProfitPrice)}`]
  switch (a.type) {
    case 'recurring-buy':
      return `buys ${c.tokenOut} with ${amount} every ${c.interval}`
    case 'limit-order':
      return `sells ${amount} for ${c.tokenOut} once that gets at least ${await amountText(c.tokenOut, c.minAmountOut!)}`
    case 'twap': {
      const pace = c.slices === undefined ? `a slice every ${c.interval}` : `in ${c.slices} slices`
      const done =
        seen.slicesDone === undefined
          ? ''
          : `; ${seen.slicesDone} slice${seen.slicesDone === 1 ? '' : 's'} done, ${await amountText(c.tokenIn, seen.filled ?? '0')} swapped`
      return `swaps ${amount} for ${c.tokenOut} ${pace} over ${c.duration}${done}`
    }
    case 'stop-loss':
    case 'take-profit': {
      const levels = [...(c.stopPrice === undefined ? [] : [`at or below ${formatUsd(c.stopPrice)}`]), ...takeProfit]
      return `sells ${amount} for ${c.tokenOut} when ${asset} is ${levels.join(' or ')}${seenText}`
    }
    case 'trailing-stop': {
      const trail = c.trailPercent === undefined ? formatUsd(c.trailAmount!) : `${c.trailPercent}%`
      const levels = [`falls ${trail} below its highest price since it was created`, ...takeProfit.map((l) => `is ${l}`)]
      return `sells ${amount} for ${c.tokenOut} when ${asset} ${levels.join(' or ')}${seenText}`
    }
    default:
      return `${a.type} of ${amount} for ${c.tokenOut}`
  }
}
