import type { SpendPolicy } from '@ats/contracts'
import { Forbidden } from '@ats/service-kit'
import type { Token } from '@ats/chain'
import { isAddress } from 'viem'
import { PriceImpactTooHigh } from '../errors.ts'
import { formatUsd } from './usd.ts'

/** Limits on what swaps from the server wallet may spend: a key's policy, or the wallet-wide settings. */
export interface SpendLimits {
  /** whose limits, for messages: "key key_abc" or "the server wallet" */
  owner: string
  maxUsdPerSwap?: number | undefined
  maxUsdPerDay?: number | undefined
  maxPriceImpactBps?: number | undefined
  allowedTokens?: string[] | undefined
  /**
   * allowedTokens as addresses, lower case: a symbol names the address book's token of that
   * symbol (an entry the address book does not know names nothing), an address names itself
   */
  allowed?: ReadonlySet<string> | undefined
  maxLaunchesPerDay?: number | undefined
  /** a swap worth more than this (or of unknown worth) waits for a person's approval; no default */
  approvalAboveUsd?: number | undefined
  /** the keys that may approve such a swap besides admin keys */
  approvers?: string[] | undefined
  /** the key that asked may approve its own swap */
  selfApprove?: boolean | undefined
  /** the wallet-wide limits (settings): they count every caller's spends */
  walletWide?: true
  /** the fields that came from the defaults (the owner's policy sets none), for messages */
  defaulted?: ReadonlySet<keyof SpendPolicy> | undefined
}

/** What a key or payer gets for a field its policy leaves out (settings; a USD cap undefined only with SPEND_UNLIMITED). */
export type SpendDefaults = Pick<SpendPolicy, 'maxUsdPerSwap' | 'maxUsdPerDay' | 'maxPriceImpactBps' | 'maxLaunchesPerDay'>

/** The address-book token of a symbol or address (the token registry's find). */
export type FindToken = (symbolOrAddress: string) => Pick<Token, 'address'> | undefined

/** allowedTokens as lower-case addresses: symbols through the address book, never through a token's own symbol(). */
function allowedAddresses(entries: string[], find: FindToken): Set<string> {
  const out = new Set<string>()
  for (const entry of entries) {
    const address = isAddress(entry, { strict: false }) ? entry : find(entry)?.address
    if (address) out.add(address.toLowerCase())
  }
  return out
}

/** The limits of `owner` (a key, a payer): its policy, each field it leaves out (or all, without a policy) from the defaults. */
export function limitsOf(owner: string, policy: SpendPolicy | null, defaults: SpendDefaults, find: FindToken): SpendLimits {
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
    maxLaunchesPerDay: pick('maxLaunchesPerDay'),
    allowedTokens: policy?.allowedTokens,
    approvalAboveUsd: policy?.approvalAboveUsd,
    approvers: policy?.approvers,
    selfApprove: policy?.selfApprove,
    allowed: policy?.allowedTokens ? allowedAddresses(policy.allowedTokens, find) : undefined,
    defaulted,
  }
}

export const hasUsdLimit = (limits: SpendLimits) => limits.maxUsdPerSwap !== undefined || limits.maxUsdPerDay !== undefined

const limitName = (limits: SpendLimits, field: keyof SpendPolicy, what: string) =>
  limits.defaulted?.has(field) ? `the default limit of ${what} (its policy sets none)` : `its limit of ${what}`

/** The lowest price-impact ceiling of the limits (undefined: none). */
export const impactCeilingOf = (limits: SpendLimits[]) =>
  limits.reduce<SpendLimits | undefined>(
    (low, l) => (l.maxPriceImpactBps !== undefined && (low?.maxPriceImpactBps ?? Infinity) > l.maxPriceImpactBps ? l : low),
    undefined,
  )

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

/** A token as messages name it: its address too when it is not the address book's token of its symbol. */
const nameOf = (token: Token, listed: boolean) =>
  listed ? token.symbol : `"${token.symbol}" at ${token.address} (not in this chain's address book)`

/**
 * Checks a swap against limits before anything is sent; `spentToday` is what the same owner's
 * swaps and launches already count for today (UTC). Throws 403 naming the limit. Tokens are
 * compared by address: allowedTokens through the address book, and a token outside it is
 * refused under a USD cap (it has no trusted price) unless allowedTokens names its address.
 */
export function checkSpend(
  limits: SpendLimits,
  swap: { tokenIn: Token; tokenOut: Token; usdValue: number | undefined; gasUsd?: number | undefined; listed: (token: Token) => boolean },
  spentToday: number,
): void {
  const prefix = `refused by the spend policy of ${limits.owner}`
  for (const token of [swap.tokenIn, swap.tokenOut]) {
    const listed = swap.listed(token)
    const named = limits.allowed?.has(token.address.toLowerCase()) ?? false
    if (limits.allowedTokens && !named) {
      throw new Forbidden(`${prefix}: ${nameOf(token, listed)} is not among its allowed tokens (${limits.allowedTokens.join(', ')})`)
    }
    if (!listed && !named && hasUsdLimit(limits)) {
      throw new Forbidden(
        `${prefix}: ${nameOf(token, listed)} has no trusted USD price, and the policy caps USD; an admin may allow it by its address in the key's allowedTokens`,
      )
    }
  }
  const gas = swap.gasUsd ? ` and ${formatUsd(swap.gasUsd)} of approval gas` : ''
  const value = swap.usdValue === undefined ? undefined : swap.usdValue + (swap.gasUsd ?? 0)
  checkUsd(
    limits,
    { what: 'this swap', value, detail: gas, unpriced: `no trusted USD price for ${nameOf(swap.tokenIn, swap.listed(swap.tokenIn))}` },
    spentToday,
  )
}

/** Checks a spend of `value` USD (a swap, a launch's gas) against the USD caps of the limits; 403 naming the cap. */
export function checkUsd(
  limits: SpendLimits,
  spend: { what: string; value: number | undefined; detail?: string; unpriced: string },
  spentToday: number,
): void {
  if (!hasUsdLimit(limits)) return
  const prefix = `refused by the spend policy of ${limits.owner}`
  if (spend.value === undefined)
    throw new Forbidden(`${prefix}: ${spend.what} has no USD price (${spend.unpriced}), and the policy caps USD`)
  const value = spend.value
  const worth = `${spend.what} is worth ${formatUsd(value)}${spend.detail ?? ''}`
  if (limits.maxUsdPerSwap !== undefined && value > limits.maxUsdPerSwap) {
    throw new Forbidden(`${prefix}: ${worth}, over ${limitName(limits, 'maxUsdPerSwap', `${formatUsd(limits.maxUsdPerSwap)} per swap`)}`)
  }
  if (limits.maxUsdPerDay !== undefined && spentToday + value > limits.maxUsdPerDay) {
    throw new Forbidden(
      `${prefix}: ${spend.what} (${formatUsd(value)}) would bring today's swaps and launches (UTC) to ${formatUsd(spentToday + value)}, over ${limitName(limits, 'maxUsdPerDay', `${formatUsd(limits.maxUsdPerDay)} per day`)}`,
    )
  }
}

/** Refuses (403) a launch over the limit's launches per UTC day; `launchedToday` counts the owner's launches not failed. */
export function checkLaunches(limits: SpendLimits, launchedToday: number): void {
  const max = limits.maxLaunchesPerDay
  if (max === undefined || launchedToday < max) return
  throw new Forbidden(
    `refused by the spend policy of ${limits.owner}: it has launched ${launchedToday} token${launchedToday === 1 ? '' : 's'} today (UTC), ${limitName(limits, 'maxLaunchesPerDay', `${max} launch${max === 1 ? '' : 'es'} per day`)}`,
  )
}

/**
 * The limits whose approvalAboveUsd holds this swap for a person's decision (the lowest such
 * threshold), or undefined: a swap worth more than it, or with no trusted USD price, waits.
 */
export function approvalAsked(
  limits: SpendLimits[],
  usdValue: number | undefined,
): (SpendLimits & { approvalAboveUsd: number }) | undefined {
  let asking: (SpendLimits & { approvalAboveUsd: number }) | undefined
  for (const limit of limits) {
    const above = limit.approvalAboveUsd
    if (above === undefined || (usdValue !== undefined && usdValue <= above)) continue
    if (!asking || above < asking.approvalAboveUsd) asking = { ...limit, approvalAboveUsd: above }
  }
  return asking
}
