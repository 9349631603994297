// The kinds of automation: how each one's config is checked, and when it runs next.
//
// recurring-buy: swap `amount` of tokenIn for tokenOut every `interval` (30s, 15m, 1h, 1d, 1w,
//   or a five-field cron expression in UTC), until `maxRuns` runs or `endAt`.
// limit-order: check every `checkEvery` (default 1m) what `amount` of tokenIn would buy; as soon
//   as the quote reaches `minAmountOut` of tokenOut, swap once and complete. `endAt` expires it.
import { automationTypes, type AutomationType, type ListedToken } from '@ats/contracts'
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
export type Config = RecurringBuy | LimitOrder

const units: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }
const every = /^([1-9][0-9]{0,5})(s|m|h|d|w)$/
const positiveInteger = /^[1-9][0-9]{0,77}$/

const bad = (message: string) => new BadRequest(`config.${message}`)

/** A fixed interval in ms, or a cron expression; undefined for neither. */
function parseInterval(raw: string): { ms: number } | { cron: string } | undefined {
  const fixed = every.exec(raw.trim())
  if (fixed) return { ms: Number(fixed[1]) * units[fixed[2]!]! }
  const fields = raw.trim().split(/\s+/)
  if (fields.length !== 5) return undefined
  try {
    CronExpressionParser.parse(raw, { tz: 'UTC' })
    return { cron: raw.trim() }
  } catch {
    return undefined
  }
}

/** When an interval or cron expression falls next after `from`. */
function nextAfter(interval: string, from: number): number {
  const parsed = parseInterval(interval)!
  if ('ms' in parsed) return from + parsed.ms
  return CronExpressionParser.parse(parsed.cron, { currentDate: new Date(from), tz: 'UTC' })
    .next()
    .getTime()
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
  const first = nextAfter(raw, options.now)
  const gap = 'ms' in parsed ? parsed.ms : nextAfter(raw, first) - first
  if (gap < options.minIntervalMs) throw bad(`${field} ${raw} is shorter than the minimum of ${options.minIntervalMs / 1000} s`)
  return raw.trim()
}

function common(config: Record<string, unknown>, options: CheckOptions): Common {
  const tokenIn = token(config, 'tokenIn', options)
  const tokenOut = token(config, 'tokenOut', options)
  if (tokenIn.address.toLowerCase() === tokenOut.address.toLowerCase()) throw bad('tokenOut must differ from tokenIn')
  const slippageBps = config.slippageBps ?? 50
  if (!Number.isInteger(slippageBps) || (slippageBps as number) < 0 || (slippageBps as number) > 5000) {
    throw bad('slippageBps must be an integer from 0 to 5000 (50 = 0.5%)')
  }
  const endAt = config.endAt
  if (endAt !== undefined && (!Number.isInteger(endAt) || (endAt as number) <= options.now)) {
    throw bad('endAt must be a time in the future, in ms since the Unix epoch')
  }
  return {
    tokenIn: tokenIn.symbol,
    tokenOut: tokenOut.symbol,
    amount: amount(config, 'amount', tokenIn.symbol),
    slippageBps: slippageBps as number,
    ...(endAt === undefined ? {} : { endAt: endAt as number }),
  }
}

const allowed: Record<AutomationType, string[]> = {
  'recurring-buy': ['tokenIn', 'tokenOut', 'amount', 'interval', 'maxRuns', 'endAt', 'slippageBps'],
  'limit-order': ['tokenIn', 'tokenOut', 'amount', 'minAmountOut', 'checkEvery', 'endAt', 'slippageBps'],
}

const isAutomationType = (type: string): type is AutomationType => (automationTypes as readonly string[]).includes(type)

/** The config of `type`, checked and normalised (token symbols, defaults); a 400 naming the problem otherwise. */
export function checkConfig(type: string, config: Record<string, unknown>, options: CheckOptions): Config {
  if (!isAutomationType(type)) throw new BadRequest(`type ${type} is not supported; types: ${automationTypes.join(', ')}`)
  const unknown = Object.keys(config).filter((key) => !allowed[type].includes(key))
  if (unknown.length > 0) throw bad(`${unknown[0]} is not a field of a ${type}; fields: ${allowed[type].join(', ')}`)
  const base = common(config, options)
  if (type === 'limit-order') {
    return {
      ...base,
      minAmountOut: amount(config, 'minAmountOut', base.tokenOut),
      checkEvery: interval(config, 'checkEvery', options, '1m'),
    }
  }
  const maxRuns = config.maxRuns
  if (maxRuns !== undefined && (!Number.isInteger(maxRuns) || (maxRuns as number) < 1)) throw bad('maxRuns must be a positive integer')
  return { ...base, interval: interval(config, 'interval', options), ...(maxRuns === undefined ? {} : { maxRuns: maxRuns as number }) }
}

/** The first time a new (or resumed) automation is due: a fixed interval at once, a cron expression at its next time. */
export function firstRunAt(config: Config, now: number): number {
  const schedule = 'interval' in config ? config.interval : config.checkEvery
  const parsed = parseInterval(schedule)!
  return 'ms' in parsed ? now : nextAfter(schedule, now)
}

/**
 * When a resumed automation is due: its next scheduled time after now, never at once. `anchor` is
 * the due time its schedule had when paused: kept if still ahead, else moved on by whole intervals
 * (a fixed interval keeps its phase; a cron expression its next time). Without one, an interval
 * from now.
 */
export function resumeRunAt(config: Config, anchor: number | null, now: number): number {
  if (anchor !== null && anchor > now) return anchor
  const schedule = 'interval' in config ? config.interval : config.checkEvery
  const parsed = parseInterval(schedule)!
  if (anchor === null || !('ms' in parsed)) return nextAfter(schedule, now)
  return anchor + (Math.floor((now - anchor) / parsed.ms) + 1) * parsed.ms
}

/** Why an automation can run no more, by its config and successful runs: endAt passed, or a limit order filled. */
export function overReason(config: Config, runs: number, now: number): string | undefined {
  if (config.endAt !== undefined && now >= config.endAt) return 'its endAt has passed'
  if ('minAmountOut' in config && runs > 0) return 'the limit order filled'
  return undefined
}

/** After a run due at `scheduledFor`, taken at `now`: the next due time after now (missed times are skipped, not caught up). */
export function nextRunAt(config: Config, now: number): number {
  return nextAfter('interval' in config ? config.interval : config.checkEvery, now)
}
