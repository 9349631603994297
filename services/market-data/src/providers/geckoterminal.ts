// GeckoTerminal's trending pools of one network (https://api.geckoterminal.com/docs): JSON:API, numbers as strings.
import type { TrendingPool } from '@ats/contracts'
import type { HttpClient } from '@ats/service-kit'
import { getAddress, isAddress } from 'viem'
import { UnexpectedAnswer } from '../errors.ts'
import { decimalString } from './decimal.ts'
import type { TrendingSource } from './types.ts'

interface PoolResource {
  attributes?: {
    name?: unknown
    address?: unknown
    base_token_price_usd?: unknown
    volume_usd?: { h24?: unknown }
    price_change_percentage?: { h24?: unknown }
  }
  relationships?: { dex?: { data?: { id?: unknown } } }
}

export function geckoTerminalTrending(http: HttpClient, { network }: { network: string }): TrendingSource {
  return {
    name: 'geckoterminal',
    async trending(limit) {
      const answer = await http.getJson<{ data?: unknown }>(`/networks/${encodeURIComponent(network)}/trending_pools`, {
        query: { include: 'dex' },
        headers: { accept: 'application/json;version=20230302' },
      })
      if (!Array.isArray(answer?.data)) throw new UnexpectedAnswer('geckoterminal', 'no data array')
      const pools: TrendingPool[] = []
      for (const { attributes: a, relationships } of answer.data as PoolResource[]) {
        if (!a || typeof a.name !== 'string' || typeof a.address !== 'string' || !isAddress(a.address)) continue
        pools.push({
          name: a.name,
          basePrice: decimalString(a.base_token_price_usd),
          volume24h: decimalString(a.volume_usd?.h24),
          change24h: decimalString(a.price_change_percentage?.h24),
          address: getAddress(a.address),
          dex: typeof relationships?.dex?.data?.id === 'string' ? relationships.dex.data.id : 'unknown',
        })
      }
      // GeckoTerminal orders by its own trending score; the spec ranks trending pools by 24h volume
      return pools.sort((x, y) => Number(y.volume24h) - Number(x.volume24h)).slice(0, limit)
    },
  }
}
