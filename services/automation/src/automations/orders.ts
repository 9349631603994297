// What an order's checks and runs decide: a stop order's levels against market-data's price (a
// trailing stop's stop following the highest price seen), a TWAP's slices (each one's amount, what
// a skipped slice carries on) and when an automation of any type is over.
import type { RunTrigger, TriggerType } from '@ats/contracts'
import { isTrigger, type Config, type RecurringBuy, type StopOrder, type Twap } from './types.ts'

/** A USD price of tokenIn and when market-data read it from its source. */
export interface PriceSeen {
  asset: string
  price: number
  at: number
}

/** What a stop order has seen: its last price; a trailing stop also the highest since creation and the stop under it. */
export interface StopState {
  price: number
  priceAt: number
  highestPrice?: number
  stopPrice?: number
}

/** What a TWAP has done: slices ended (swapped or not), base units swapped, carried into the next slice, slices skipped. */
export interface TwapState {
  slicesDone: number
  filled: string
  carried: string
  skipped: number
  windowEndsAt: number
}

// ten significant digits: 2699.9999999999995 is 2700
const shown = (usd: number) => Number(usd.toPrecision(10))

/** The stop level: a trailing stop's trail under the highest price, else the fixed stopPrice. */
function stopLevel(order: StopOrder, highest: number): number | undefined {
  if (order.trailPercent !== undefined) return shown(highest * (1 - order.trailPercent / 100))
  if (order.trailAmount !== undefined) return shown(highest - order.trailAmount)
  return order.stopPrice
}

/** A check of a stop order at price `seen`: its new state, and the trigger when a level is crossed. */
export function watchStop(
  type: TriggerType,
  order: StopOrder,
  state: StopState | null,
  seen: PriceSeen,
): { state: StopState; fired?: RunTrigger } {
  const trailing = type === 'trailing-stop'
  const highestPrice = trailing ? Math.max(state?.highestPrice ?? seen.price, seen.price) : undefined
  const stopPrice = stopLevel(order, highestPrice ?? 0)
  const next: StopState = { price: seen.price, priceAt: seen.at, ...(trailing ? { highestPrice, stopPrice } : {}) }
  const at = { price: seen.price, priceAt: seen.at }
  if (stopPrice !== undefined && seen.price <= stopPrice) {
    const under = trailing
      ? `, ${order.trailPercent !== undefined ? `${order.trailPercent}%` : `${order.trailAmount} USD`} under its highest ${highestPrice}`
      : ''
    return {
      state: next,
      fired: {
        kind: trailing ? 'trailing-stop' : 'stop-loss',
        detail: `${trailing ? 'trailing-stop' : 'stop-loss'}: ${seen.asset} at ${seen.price} USD, at or below ${stopPrice}${under}`,
        threshold: stopPrice,
        ...at,
      },
    }
  }
  if (order.takeProfitPrice !== undefined && seen.price >= order.takeProfitPrice) {
    return {
      state: next,
      fired: {
        kind: 'take-profit',
        detail: `take-profit: ${seen.asset} at ${seen.price} USD, at or above ${order.takeProfitPrice}`,
        threshold: order.takeProfitPrice,
        ...at,
      },
    }
  }
  return { state: next }
}

/** What a stop order waits for, in words: its levels against the last price. */
export function watching(order: StopOrder, state: StopState, asset: string): string {
  const stop = state.stopPrice ?? order.stopPrice
  const levels = [
    ...(stop === undefined ? [] : [`at or below ${stop}`]),
    ...(order.takeProfitPrice === undefined ? [] : [`at or above ${order.takeProfitPrice}`]),
  ]
  const high = state.highestPrice === undefined ? '' : ` (highest ${state.highestPrice})`
  return `watching: ${asset} at ${state.price} USD${high}; sells ${levels.join(' or ')}`
}

/** Why a stop order that fired ended, the other level (when it had one) cancelled. */
export function firedReason(order: StopOrder, trigger: RunTrigger): string {
  const other =
    trigger.kind === 'take-profit'
      ? order.stopPrice !== undefined || order.trailPercent !== undefined || order.trailAmount !== undefined
        ? '; its stop is cancelled'
        : ''
      : order.takeProfitPrice !== undefined
        ? `; its take-profit at ${order.takeProfitPrice} is cancelled`
        : ''
  return `${trigger.detail}: sold${other}`
}

/** When a TWAP started (its window's end less its slices): slice k is due (k - 1) slices after it. */
export const twapStartedAt = (order: Twap, state: TwapState) => state.windowEndsAt - order.slices * order.sliceMs

export const twapStart = (order: Twap, now: number): TwapState => ({
  slicesDone: 0,
  filled: '0',
  carried: '0',
  skipped: 0,
  windowEndsAt: now + order.slices * order.sliceMs,
})

/** The next slice: its share of the total (the last takes what the division leaves) plus what skipped slices carried. */
export function nextSlice(order: Twap, state: TwapState): { amountIn: string; trigger: RunTrigger } {
  const total = BigInt(order.amount)
  const share = total / BigInt(order.slices)
  const index = state.slicesDone + 1
  const own = index === order.slices ? total - share * BigInt(order.slices - 1) : share
  const carried = BigInt(state.carried)
  const detail = `slice ${index} of ${order.slices}${carried > 0n ? ` (with ${carried} base units carried from skipped slices)` : ''}`
  return { amountIn: (own + carried).toString(), trigger: { kind: 'twap-slice', detail, slice: index, slices: order.slices } }
}

/** A slice ended: swapped (its amount filled) or not (skipped or failed: its amount carried on, or dropped). */
export function afterSlice(order: Twap, state: TwapState, amountIn: string, swapped: boolean): TwapState {
  return {
    ...state,
    slicesDone: state.slicesDone + 1,
    filled: swapped ? (BigInt(state.filled) + BigInt(amountIn)).toString() : state.filled,
    carried: !swapped && order.remainder === 'carry' ? amountIn : '0',
    skipped: state.skipped + (swapped ? 0 : 1),
  }
}

const filledText = (order: Twap, state: TwapState) =>
  `filled ${state.filled} of ${order.amount} ${order.tokenIn} base units (${state.slicesDone - state.skipped} of ${order.slices} slices swapped, ${state.skipped} not)`

/**
 * Why an automation can run no more, or undefined: endAt passed, a limit order filled, a stop
 * order fired, a TWAP made its slices or its window ended, a recurring buy made its maxRuns.
 */
export function overReason(automation: { type: string; config: unknown; runs: number; state: unknown }, now: number): string | undefined {
  const config = automation.config as Config
  if (config.endAt !== undefined && now >= config.endAt) return 'its endAt has passed'
  if (automation.type === 'limit-order' && automation.runs > 0) return 'the limit order filled'
  if (isTrigger(automation.type) && automation.runs > 0) return 'the stop order fired'
  if (automation.type === 'twap') {
    const [order, state] = [config as Twap, automation.state as TwapState]
    if (state.slicesDone >= order.slices) return `the TWAP made its ${order.slices} slices: ${filledText(order, state)}`
    if (now >= state.windowEndsAt) return `the TWAP's window ended: ${filledText(order, state)}`
  }
  const { maxRuns } = config as RecurringBuy
  if (automation.type === 'recurring-buy' && maxRuns !== undefined && automation.runs >= maxRuns)
    return `it made its ${maxRuns} runs (maxRuns)`
  return undefined
}
