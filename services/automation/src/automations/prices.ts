// The USD prices stop orders watch: market-data's (what GET /market/prices answers, from the same
// pools or CoinGecko), read over NATS once for every order a scheduler checks in a round,
// never a quote per check. A price older than AUTOMATION_PRICE_MAX_AGE_MS (market-data's read, or
// the source's own time of it when older) is not one to act on.
import type { NatsChannels } from '@ats/contracts'
import { cachedLoader, callEndpoint } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { PriceSeen } from './orders.ts'
import { priceAssetOf } from './types.ts'

export interface PriceReaderOptions {
  nc: NatsConnection
  channels: NatsChannels
  /** AUTOMATION_PRICE_MAX_AGE_MS */
  maxAgeMs: number
  /** how long one read serves every order: half of AUTOMATION_TRIGGER_CHECK_MS, at most a second */
  reuseMs: number
  timeoutMs?: number
}

export function createPriceReader({ nc, channels, maxAgeMs, reuseMs, timeoutMs = 5_000 }: PriceReaderOptions) {
  const prices = cachedLoader({ max: 1, ttlMs: reuseMs, load: () => callEndpoint(nc, channels.market.prices, {}, { timeoutMs }) })

  /** The price of `symbol` (tokenIn) now, or why there is none to act on: market-data unreachable, no price, too old. */
  return async function priceOf(symbol: string, now = Date.now()): Promise<PriceSeen | { none: string }> {
    const asset = priceAssetOf(symbol)
    if (!asset) return { none: `${symbol} has no USD price from market-data` }
    let answer: Awaited<ReturnType<typeof prices.get>>
    try {
      answer = await prices.get('all')
    } catch (error) {
      return { none: `market-data's prices are unavailable (${(error as Error).message})` }
    }
    const entry = answer.prices[asset]
    if (!entry) return { none: `market-data has no price for ${asset} now` }
    // the older of market-data's read and the source's own time of the price
    const at = Math.min(entry.updatedAt ?? answer.updatedAt, answer.updatedAt)
    const age = now - at
    if (age > maxAgeMs) {
      return {
        none: `${asset}'s price (${entry.price} USD) is stale: read ${Math.round(age / 1000)} s ago, over the ${maxAgeMs / 1000} s a stop order acts on`,
      }
    }
    return { asset, price: entry.price, at }
  }
}
export type PriceOf = ReturnType<typeof createPriceReader>
