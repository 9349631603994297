// The kinds of automation: how each one's config is checked, and when it runs next.
//
// recurring-buy: swap `amount` of tokenIn for tokenOut every `interval` (30s, 15m, 1h, 1d, 1w,
//   or a five-field cron expression in UTC), until `maxRuns` runs or `endAt`.
// limit-order: check every `checkEvery` (default 1m) what `amount` of tokenIn would buy; as soon
//   as the quote reaches `minAmountOut` of tokenOut, swap once and complete. `endAt` expires it.
// twap: swap the total `amount` in `slices` over `duration` (one slice every duration / slices),
//   each slice skipped when its price impact is over `maxImpactBps` (its amount carried into the
//   next slice, or dropped); done after the last slice, or when the window ends.
// stop-loss, take-profit, trailing-stop: sell `amount` of tokenIn once, when its USD price (from
//   market-data) falls to `stopPrice`, rises to `takeProfitPrice`, or falls `trailPercent` /
//   `trailAmount` below the highest price seen since creation; a stop order with both levels ends
//   when either fires (the other is cancelled). Orders.ts holds how each check decides.
import { automationTypes, coreAssets, triggerTypes, type AutomationType, type ListedToken, type TriggerType } from '@ats/contracts'
import { BadRequest } from '@ats/service-kit'
import { CronExpressionParser } from 'cron-parser'

interface Common {
  tokenIn: string
  tokenOut: string
  amount: string
  slippageBps: number
  endAt?: number
}
export interface RecurringBuy extends Common {
  interval: string
  maxRuns?: number
}
export interface LimitOrder extends Common {
  minAmountOut: string
  checkEvery: string
}
export interface Twap extends Common {
  duration: string
  slices: number
  /** duration / slices, in ms */
  sliceMs: number
  maxImpactBps: number
  /** a skipped slice's amount: carried into the next slice, or dropped */
  remainder: 'carry' | 'drop'
}
/** stop-loss, take-profit and trailing-stop: at least one level; a trailing stop's stop follows the price. */
export interface StopOrder extends Common {
  stopPrice?: number
  takeProfitPrice?: number
  trailPercent?: number
  trailAmount?: number
}
export type Config = RecurringBuy | LimitOrder | Twap | StopOrder

export const isTrigger = (type: string): type is TriggerType => (triggerTypes as readonly string[]).includes(type)

/** The market-data asset a token is priced as (WETH as ETH, WBTC as BTC), or undefined. */
export function priceAssetOf(symbol: string): string | undefined {
  const asset = symbol === 'WETH' ? 'ETH' : symbol === 'WBTC' ? 'BTC' : symbol
  return (coreAssets as readonly string[]).includes(asset) ? asset : undefined
}

const units: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }
const every = /^([1-9][0-9]{0,5})(s|m|h|d|w)$/
const positiveInteger = /^[1-9][0-9]{0,77}$/

const bad = (message: string) => new BadRequest(`config.${message}`)

/** An integer from `min` to `max`. */
const integerIn = (value: unknown, min: number, max = Number.POSITIVE_INFINITY): value is number =>
  Number.isInteger(value) && (value as number) >= min && (value as number) <= max

/** A fixed interval ("30s", "5m", "1h", "1d", "1w") in ms; undefined for anything else. */
function fixedMs(raw: unknown): number | undefined {
  const fixed = typeof raw === 'string' ? every.exec(raw.trim()) : null
  return fixed ? Number(fixed[1]) * units[fixed[2]!]! : undefined
}

type Schedule = { ms: number } | { cron: string }

/** A fixed interval in ms, or a cron expression; undefined for neither. */
function parseInterval(raw: string): Schedule | undefined {
  const ms = fixedMs(raw)
  if (ms !== undefined) return { ms }
  const fields = raw.trim().split(/\s+/)
  if (fields.length !== 5) return undefined
  try {
    CronExpressionParser.parse(raw, { tz: 'UTC' })
    return { cron: raw.trim() }
  } catch {
    return undefined
  }
}

export interface CheckOptions {
  /** the chain's tokens, by symbol or address */
  tokenOf(ref: string): ListedToken | undefined
  knownSymbols: string[]
  minIntervalMs: number
  now: number
}

function token(config: Record<string, unknown>, field: 'tokenIn' | 'tokenOut', options: CheckOptions): ListedToken {
  const ref = config[field]
  if (typeof ref !== 'string' || ref === '') throw bad(`${field} is required: a token symbol or address`)
  const found = options.tokenOf(ref)
  if (!found) throw bad(`${field} ${ref} is not a known token; known: ${options.knownSymbols.join(', ')}`)
  return found
}

function amount(config: Record<string, unknown>, field: 'amount' | 'minAmountOut', of: string): string {
  const raw = config[field]
  if (typeof raw !== 'string' || !positiveInteger.test(raw)) {
    throw bad(`${field} must be a positive integer string in ${of} base units (1 USDC = "1000000"), got ${JSON.stringify(raw)}`)
  }
  return raw
}

function interval(config: Record<string, unknown>, field: 'interval' | 'checkEvery', options: CheckOptions, fallback?: string): string {
  const raw = config[field] ?? fallback
  if (typeof raw !== 'string') throw bad(`${field} is required: 30s, 15m, 1h, 1d, 1w or a cron expression such as "0 9 * * 1"`)
  const parsed = parseInterval(raw)
  if (!parsed) throw bad(`${field} ${JSON.stringify(raw)} is neither an interval (30s, 15m, 1h, 1d, 1w) nor a five-field cron expression`)
  // a cron expression's shortest gap: two consecutive fire times
  const first = after(parsed, options.now)
  const gap = 'ms' in parsed ? parsed.ms : after(parsed, first) - first
  if (gap < options.minIntervalMs) throw bad(`${field} ${raw} is shorter than the minimum of ${options.minIntervalMs / 1000} s`)
  return raw.trim()
}

function common(config: Record<string, unknown>, options: CheckOptions): Common {
  const tokenIn = token(config, 'tokenIn', options)
  const tokenOut = token(config, 'tokenOut', options)
  if (tokenIn.address.toLowerCase() === tokenOut.address.toLowerCase()) throw bad('tokenOut must differ from tokenIn')
  const slippageBps = config.slippageBps ?? 50
  if (!integerIn(slippageBps, 0, 5000)) throw bad('slippageBps must be an integer from 0 to 5000 (50 = 0.5%)')
  const endAt = config.endAt
  if (endAt !== undefined && (!Number.isInteger(endAt) || (endAt as number) <= options.now)) {
    throw bad('endAt must be a time in the future, in ms since the Unix epoch')
  }
  return {
    tokenIn: tokenIn.symbol,
    tokenOut: tokenOut.symbol,
    amount: amount(config, 'amount', tokenIn.symbol),
    slippageBps,
    ...(endAt === undefined ? {} : { endAt: endAt as number }),
  }
}

const stopFields = ['tokenIn', 'tokenOut', 'amount', 'endAt', 'slippageBps', 'takeProfitPrice']
const allowed: Record<AutomationType, string[]> = {
  'recurring-buy': ['tokenIn', 'tokenOut', 'amount', 'interval', 'maxRuns', 'endAt', 'slippageBps'],
  'limit-order': ['tokenIn', 'tokenOut', 'amount', 'minAmountOut', 'checkEvery', 'endAt', 'slippageBps'],
  twap: ['tokenIn', 'tokenOut', 'amount', 'duration', 'slices', 'interval', 'maxImpactBps', 'remainder', 'slippageBps'],
  'stop-loss': [...stopFields, 'stopPrice'],
  'take-profit': [...stopFields, 'stopPrice'],
  'trailing-stop': [...stopFields, 'trailPercent', 'trailAmount'],
}

/** A USD price: a positive number (or a decimal string, "2,500" and "$2500" not: the agent parses words). */
function usd(config: Record<string, unknown>, field: keyof StopOrder, required: boolean): number | undefined {
  const raw = config[field]
  if (raw === undefined && !required) return undefined
  const value = typeof raw === 'string' && /^[0-9]+(\.[0-9]+)?$/.test(raw) ? Number(raw) : raw
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw bad(`${field} ${required ? 'is required: ' : 'must be '}a price in USD per whole token, a positive number (2500.5)`)
  }
  return value
}

function stopOrder(type: TriggerType, config: Record<string, unknown>, base: Common): StopOrder {
  if (!priceAssetOf(base.tokenIn)) {
    throw bad(
      `tokenIn ${base.tokenIn} has no USD price from market-data, so no price can trigger its sale; stop orders sell ${coreAssets.join(', ')} (ETH as WETH, BTC as WBTC)`,
    )
  }
  const takeProfitPrice = usd(config, 'takeProfitPrice', type === 'take-profit')
  const levels = { ...(takeProfitPrice === undefined ? {} : { takeProfitPrice }) }
  if (type !== 'trailing-stop') {
    const stopPrice = usd(config, 'stopPrice', type === 'stop-loss')
    if (stopPrice !== undefined && takeProfitPrice !== undefined && stopPrice >= takeProfitPrice) {
      throw bad(`stopPrice ${stopPrice} must be below takeProfitPrice ${takeProfitPrice}`)
    }
    return { ...base, ...levels, ...(stopPrice === undefined ? {} : { stopPrice }) }
  }
  const { trailPercent, trailAmount } = config
  if ((trailPercent === undefined) === (trailAmount === undefined)) {
    throw bad(
      'trailPercent or trailAmount: a trailing-stop takes one of them (trailPercent 10 = the stop 10% below the highest price; trailAmount in USD below it)',
    )
  }
  if (trailPercent !== undefined) {
    if (typeof trailPercent !== 'number' || !(trailPercent > 0 && trailPercent < 100)) {
      throw bad('trailPercent must be a number above 0 and below 100 (10 = 10% below the highest price)')
    }
    return { ...base, ...levels, trailPercent }
  }
  return { ...base, ...levels, trailAmount: usd(config, 'trailAmount', true)! }
}

function twap(config: Record<string, unknown>, base: Common, options: CheckOptions): Twap {
  const duration = config.duration
  const durationMs = fixedMs(duration)
  if (durationMs === undefined) throw bad('duration is required: how long the TWAP runs, e.g. "30m", "2h", "1d"')
  const { slices: rawSlices, interval: rawInterval } = config
  if ((rawSlices === undefined) === (rawInterval === undefined)) {
    throw bad('slices or interval: a twap takes one of them (slices: how many parts, 2-1000; interval: one part every "5m")')
  }
  let slices: number
  if (rawSlices !== undefined) {
    if (!integerIn(rawSlices, 2, 1000)) throw bad('slices must be an integer from 2 to 1000')
    slices = rawSlices
  } else {
    const intervalMs = fixedMs(rawInterval)
    if (intervalMs === undefined) throw bad(`interval ${JSON.stringify(rawInterval)} must be a fixed interval such as "30s", "5m", "1h"`)
    if (durationMs < 2 * intervalMs) {
      throw bad(`duration ${duration} is shorter than two intervals of ${rawInterval}: a TWAP needs at least 2 slices`)
    }
    slices = Math.min(1000, Math.floor(durationMs / intervalMs))
  }
  const sliceMs = Math.floor(durationMs / slices)
  if (sliceMs < options.minIntervalMs) {
    throw bad(
      `duration ${duration} in ${slices} slices is a slice every ${sliceMs / 1000} s, shorter than the minimum interval of ${options.minIntervalMs / 1000} s: use fewer slices or a longer duration`,
    )
  }
  if (BigInt(base.amount) < BigInt(slices)) throw bad(`amount ${base.amount} cannot be cut into ${slices} slices`)
  const maxImpactBps = config.maxImpactBps ?? 100
  if (!integerIn(maxImpactBps, 1, 5000)) throw bad('maxImpactBps must be an integer from 1 to 5000 (100 = 1%)')
  const remainder = config.remainder ?? 'carry'
  if (remainder !== 'carry' && remainder !== 'drop') throw bad('remainder must be "carry" (a skipped slice goes into the next) or "drop"')
  return { ...base, duration: (duration as string).trim(), slices, sliceMs, maxImpactBps, remainder }
}

const isAutomationType = (type: string): type is AutomationType => (automationTypes as readonly string[]).includes(type)

/** The config of `type`, checked and normalised (token symbols, defaults); a 400 naming the problem otherwise. */
export function checkConfig(type: string, config: Record<string, unknown>, options: CheckOptions): Config {
  if (!isAutomationType(type)) throw new BadRequest(`type ${type} is not supported; types: ${automationTypes.join(', ')}`)
  const unknown = Object.keys(config).filter((key) => !allowed[type].includes(key))
  if (unknown.length > 0) throw bad(`${unknown[0]} is not a field of a ${type}; fields: ${allowed[type].join(', ')}`)
  const base = common(config, options)
  if (type === 'twap') return twap(config, base, options)
  if (isTrigger(type)) return stopOrder(type, config, base)
  if (type === 'limit-order') {
    return {
      ...base,
      minAmountOut: amount(config, 'minAmountOut', base.tokenOut),
      checkEvery: interval(config, 'checkEvery', options, '1m'),
    }
  }
  const maxRuns = config.maxRuns
  if (maxRuns !== undefined && !integerIn(maxRuns, 1)) throw bad('maxRuns must be a positive integer')
  return { ...base, interval: interval(config, 'interval', options), ...(maxRuns === undefined ? {} : { maxRuns }) }
}

/** How often an automation is due: its interval or cron, a limit order's checkEvery, a TWAP's slice, or a stop order's check (the setting). */
function scheduleOf(config: Config, triggerCheckMs: number): Schedule {
  if ('sliceMs' in config) return { ms: config.sliceMs }
  if ('interval' in config) return parseInterval(config.interval)!
  if ('checkEvery' in config) return parseInterval(config.checkEvery)!
  return { ms: triggerCheckMs }
}

const after = (schedule: Schedule, from: number) =>
  'ms' in schedule
    ? from + schedule.ms
    : CronExpressionParser.parse(schedule.cron, { currentDate: new Date(from), tz: 'UTC' })
        .next()
        .getTime()

/** The first time a new (or resumed) automation is due: a fixed interval at once, a cron expression at its next time. */
export function firstRunAt(config: Config, now: number, triggerCheckMs: number): number {
  const schedule = scheduleOf(config, triggerCheckMs)
  return 'ms' in schedule ? now : after(schedule, now)
}

/**
 * When a resumed automation is due: its next scheduled time after now, never at once. `anchor` is
 * the due time its schedule had when paused: kept if still ahead, else moved on by whole intervals
 * (a fixed interval keeps its phase; a cron expression its next time). Without one, an interval
 * from now.
 */
export function resumeRunAt(config: Config, anchor: number | null, now: number, triggerCheckMs: number): number {
  if (anchor !== null && anchor > now) return anchor
  const schedule = scheduleOf(config, triggerCheckMs)
  if (anchor === null || !('ms' in schedule)) return after(schedule, now)
  return anchor + (Math.floor((now - anchor) / schedule.ms) + 1) * schedule.ms
}

/** After a run or check taken at `now`: the next due time after now (missed times are skipped, not caught up). */
export function nextRunAt(config: Config, now: number, triggerCheckMs: number): number {
  return after(scheduleOf(config, triggerCheckMs), now)
}
