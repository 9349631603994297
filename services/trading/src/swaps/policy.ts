import type { SpendPolicy } from '@ats/contracts'
import { Forbidden, createError } from '@ats/service-kit'
import type { Token } from '@ats/chain'
import { formatUsd } from './usd.ts'

/** Limits on what swaps from the server wallet may spend: a key's policy, or the wallet-wide settings. */
export interface SpendLimits {
  /** whose limits, for messages: "key key_abc" or "the server wallet" */
  owner: string
  maxUsdPerSwap?: number | undefined
  maxUsdPerDay?: number | undefined
  maxPriceImpactBps?: number | undefined
  allowedTokens?: string[] | undefined
  /** the fields that came from the defaults (the owner's policy sets none), for messages */
  defaulted?: ReadonlySet<keyof SpendPolicy> | undefined
}

/** What a key or payer gets for a field its policy leaves out (settings; a USD cap undefined only with SPEND_UNLIMITED). */
export type SpendDefaults = Pick<SpendPolicy, 'maxUsdPerSwap' | 'maxUsdPerDay' | 'maxPriceImpactBps'>

export const PriceImpactTooHigh = createError<[string]>('ATS_ERR_TRADING_PRICE_IMPACT', '%s', 422)

function withDefaults(owner: string, policy: SpendPolicy | null, defaults: SpendDefaults): SpendLimits {
  const defaulted = new Set<keyof SpendPolicy>()
  const pick = <K extends keyof SpendDefaults>(field: K) => {
    if (policy?.[field] !== undefined) return policy[field]
    if (defaults[field] !== undefined) defaulted.add(field)
    return defaults[field]
  }
  return {
    owner,
    maxUsdPerSwap: pick('maxUsdPerSwap'),
    maxUsdPerDay: pick('maxUsdPerDay'),
    maxPriceImpactBps: pick('maxPriceImpactBps'),
    allowedTokens: policy?.allowedTokens,
    defaulted,
  }
}

/** A key's limits: its policy, each field it leaves out (or all, without a policy) from the defaults. */
export const limitsOfKey = (keyId: string, policy: SpendPolicy | null, defaults: SpendDefaults) => withDefaults(`key ${keyId}`, policy, defaults)
export const limitsOfPayer = (address: string, policy: SpendPolicy, defaults: SpendDefaults) => withDefaults(`payer ${address}`, policy, defaults)

export const hasUsdLimit = (limits: SpendLimits) => limits.maxUsdPerSwap !== undefined || limits.maxUsdPerDay !== undefined

const limitName = (limits: SpendLimits, field: keyof SpendPolicy, what: string) =>
  limits.defaulted?.has(field) ? `the default limit of ${what} (its policy sets none)` : `its limit of ${what}`

/** The lowest price-impact ceiling of the limits (undefined: none). */
export const impactCeilingOf = (limits: SpendLimits[]) =>
  limits.reduce<SpendLimits | undefined>((low, l) => (l.maxPriceImpactBps !== undefined && (low?.maxPriceImpactBps ?? Infinity) > l.maxPriceImpactBps ? l : low), undefined)

const percent = (bps: number) => `${(bps / 100).toFixed(2).replace(/\.?0+$/, '')}%`

/** Refuses (422) a swap whose price impact is over the lowest ceiling of the limits, before anything is sent. */
export function checkImpact(limits: SpendLimits[], impactBps: number): void {
  const lowest = impactCeilingOf(limits)
  if (!lowest || impactBps <= lowest.maxPriceImpactBps!) return
  const ceiling = lowest.maxPriceImpactBps!
  throw new PriceImpactTooHigh(
    `refused by the spend policy of ${lowest.owner}: the price impact of this swap is ${percent(impactBps)} (${impactBps} bps), over ${limitName(lowest, 'maxPriceImpactBps', `${percent(ceiling)} (${ceiling} bps)`)}; swap a smaller amount`,
  )
}

/**
 * Checks a swap against limits before anything is sent; `spentToday` is what the same owner's
 * swaps already count for today (UTC). Throws 403 naming the limit.
 */
export function checkSpend(limits: SpendLimits, swap: { tokenIn: Token; tokenOut: Token; usdValue: number | undefined }, spentToday: number): void {
  const prefix = `refused by the spend policy of ${limits.owner}`
  if (limits.allowedTokens) {
    const allowed = new Set(limits.allowedTokens.map((t) => t.toLowerCase()))
    for (const token of [swap.tokenIn, swap.tokenOut]) {
      if (!allowed.has(token.symbol.toLowerCase()) && !allowed.has(token.address.toLowerCase())) {
        throw new Forbidden(`${prefix}: ${token.symbol} is not among its allowed tokens (${limits.allowedTokens.join(', ')})`)
      }
    }
  }
  if (!hasUsdLimit(limits)) return
  if (swap.usdValue === undefined) {
    throw new Forbidden(`${prefix}: the swap has no USD price (no route from ${swap.tokenIn.symbol} to USDC), and the policy caps USD`)
  }
  const value = swap.usdValue
  if (limits.maxUsdPerSwap !== undefined && value > limits.maxUsdPerSwap) {
    throw new Forbidden(`${prefix}: this swap is worth ${formatUsd(value)}, over ${limitName(limits, 'maxUsdPerSwap', `${formatUsd(limits.maxUsdPerSwap)} per swap`)}`)
  }
  if (limits.maxUsdPerDay !== undefined && spentToday + value > limits.maxUsdPerDay) {
    throw new Forbidden(
      `${prefix}: this swap (${formatUsd(value)}) would bring today's swaps (UTC) to ${formatUsd(spentToday + value)}, over ${limitName(limits, 'maxUsdPerDay', `${formatUsd(limits.maxUsdPerDay)} per day`)}`,
    )
  }
}
