// The pools price source: the core assets priced from the address book's pools now, change24h from the price history it records itself.
import { coreAssets, type CoreAsset, type PriceEntry } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import type { Address } from 'viem'
import type { PrismaClient } from '../generated/prisma/client.ts'
import type { PriceSource } from '../providers/types.ts'
import type { DevnetPools, PoolSnapshot } from './pools.ts'

export const DAY_MS = 24 * 3600_000

/** ETH and BTC trade as their wrapped tokens on chain. */
const symbolOf = (asset: CoreAsset) => (asset === 'ETH' ? 'WETH' : asset === 'BTC' ? 'WBTC' : asset)

/** A pool's history is kept under this asset name: its pair price (whole quote per whole base). */
export const poolAsset = (pool: Address) => `pool:${pool}`

/**
 * The price of each asset 24 hours before `at`: the latest sample at or before at − 24 h; while
 * the history is younger than 24 hours, its oldest sample. An asset without samples is absent.
 */
export async function pricesDayBefore(db: PrismaClient, assets: string[], at: number): Promise<Map<string, number>> {
  if (assets.length === 0) return new Map()
  const cutoff = new Date(at - DAY_MS)
  const rows = await db.$queryRaw<Array<{ asset: string; price: number }>>`
    SELECT DISTINCT ON (asset) asset, price FROM price_samples
    WHERE asset = ANY(${assets}::text[])
    ORDER BY asset, bucket <= ${cutoff} DESC, CASE WHEN bucket <= ${cutoff} THEN bucket END DESC, bucket`
  return new Map(rows.map(({ asset, price }) => [asset, price]))
}

/** The percent change from `then` to `now` (-1.5 = down 1.5%); 0 without a `then`. */
export const percentChange = (now: number, then: number | undefined) => (then === undefined || then <= 0 ? 0 : (now / then - 1) * 100)

const usable = (price: number | undefined): price is number => price !== undefined && Number.isFinite(price) && price > 0

export interface PoolPrices extends PriceSource {
  /** samples every core asset's price and every pool's pair price into the bucket of `intervalMs` now holds; a bucket already sampled (by any replica) is kept */
  record(intervalMs: number): Promise<void>
}

/**
 * USD prices of the core assets from the pools (USDC is the dollar: see devnetPools), with
 * change24h against the history `record` keeps in price_samples. An asset without a pool
 * route to USDC is left out and logged.
 */
export function poolPrices({
  db,
  pools,
  log,
  now = Date.now,
}: {
  db: PrismaClient
  pools: DevnetPools
  log: Logger
  now?: () => number
}): PoolPrices {
  function assetPrices({ tokens, usd }: PoolSnapshot): Map<CoreAsset, number> {
    const prices = new Map<CoreAsset, number>()
    const missing: CoreAsset[] = []
    for (const asset of coreAssets) {
      const token = tokens.find((t) => t.symbol === symbolOf(asset))
      const price = token && usd(token.address)
      // 12 significant digits: the float noise of sqrtPriceX96² (3000.0000000000005) is not a price
      if (usable(price)) prices.set(asset, Number(price.toPrecision(12)))
      else missing.push(asset)
    }
    if (missing.length > 0) log.warn({ assets: missing }, 'pools price source: no pool prices these assets; they are left out')
    return prices
  }

  return {
    name: 'pools',
    async prices() {
      const current = assetPrices(await pools.snapshot())
      const then = await pricesDayBefore(db, [...current.keys()], now())
      // ten decimals of a percent: float noise (-1.1e-14) is no change
      const entries = [...current].map(([asset, price]): [CoreAsset, PriceEntry] => [
        asset,
        { price, change24h: Number(percentChange(price, then.get(asset)).toFixed(10)) },
      ])
      return Object.fromEntries(entries)
    },
    async record(intervalMs) {
      const snapshot = await pools.snapshot()
      const bucket = new Date(Math.floor(now() / intervalMs) * intervalMs)
      const samples = [
        ...[...assetPrices(snapshot)].map(([asset, price]) => ({ asset, price })),
        ...snapshot.pools
          .filter((pool) => usable(pool.pairPrice))
          .map((pool) => ({ asset: poolAsset(pool.address), price: pool.pairPrice })),
      ]
      await db.priceSample.createMany({ data: samples.map((sample) => ({ ...sample, bucket })), skipDuplicates: true })
    },
  }
}
