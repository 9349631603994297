import type { SpendPolicy } from '@ats/contracts'
import { Forbidden } from '@ats/service-kit'
import type { Token } from '@ats/chain'
import { formatUsd } from './usd.ts'

/** Limits on what swaps from the server wallet may spend: a key's policy, or the wallet-wide settings. */
export interface SpendLimits {
  /** whose limits, for messages: "key key_abc" or "the server wallet" */
  owner: string
  maxUsdPerSwap?: number | undefined
  maxUsdPerDay?: number | undefined
  allowedTokens?: string[] | undefined
}

export const limitsOfKey = (keyId: string, policy: SpendPolicy): SpendLimits => ({ owner: `key ${keyId}`, ...policy })
export const limitsOfPayer = (address: string, policy: SpendPolicy): SpendLimits => ({ owner: `payer ${address}`, ...policy })

export const hasUsdLimit = (limits: SpendLimits) => limits.maxUsdPerSwap !== undefined || limits.maxUsdPerDay !== undefined

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
    throw new Forbidden(`${prefix}: this swap is worth ${formatUsd(value)}, over its limit of ${formatUsd(limits.maxUsdPerSwap)} per swap`)
  }
  if (limits.maxUsdPerDay !== undefined && spentToday + value > limits.maxUsdPerDay) {
    throw new Forbidden(
      `${prefix}: this swap (${formatUsd(value)}) would bring today's swaps (UTC) to ${formatUsd(spentToday + value)}, over its limit of ${formatUsd(limits.maxUsdPerDay)} per day`,
    )
  }
}
