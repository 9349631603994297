// CoinGecko's simple price (https://docs.coingecko.com/reference/simple-price): the core assets' USD price and 24h change.
import type { CoreAsset, PriceEntry } from '@ats/contracts'
import type { HttpClient } from '@ats/service-kit'
import { UnexpectedAnswer } from '../errors.ts'
import type { PriceSource } from './types.ts'

/** CoinGecko's coin id of each core asset. */
export const coingeckoIds: Record<CoreAsset, string> = {
  ETH: 'ethereum',
  BTC: 'bitcoin',
  USDC: 'usd-coin',
  USDT: 'tether',
  ARB: 'arbitrum',
  GMX: 'gmx',
  LINK: 'chainlink',
}

type SimplePrice = Record<string, { usd?: unknown; usd_24h_change?: unknown; last_updated_at?: unknown } | null | undefined>

export function coingeckoPrices(http: HttpClient): PriceSource {
  return {
    name: 'coingecko',
    async prices() {
      const answer = await http.getJson<SimplePrice>('/simple/price', {
        query: {
          ids: Object.values(coingeckoIds).join(','),
          vs_currencies: 'usd',
          include_24hr_change: 'true',
          include_last_updated_at: 'true',
        },
      })
      if (typeof answer !== 'object' || answer === null || Array.isArray(answer))
        throw new UnexpectedAnswer('coingecko', 'not an object of coins')
      const prices: Partial<Record<CoreAsset, PriceEntry>> = {}
      for (const [asset, id] of Object.entries(coingeckoIds) as Array<[CoreAsset, string]>) {
        const coin = answer[id]
        if (coin === undefined) continue // a coin CoinGecko left out: the others still answer
        if (typeof coin?.usd !== 'number') throw new UnexpectedAnswer('coingecko', `${id}.usd is not a number`)
        // the change is null for a coin without 24 h of history
        prices[asset] = {
          price: coin.usd,
          change24h: typeof coin.usd_24h_change === 'number' ? coin.usd_24h_change : 0,
          // CoinGecko's own time of the price (unix seconds): old when the coin's markets stopped
          ...(typeof coin.last_updated_at === 'number' ? { updatedAt: coin.last_updated_at * 1000 } : {}),
        }
      }
      return prices
    },
  }
}
