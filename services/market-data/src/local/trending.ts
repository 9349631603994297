// The pools trending source: the address book's pools ranked by the USD volume of the Swap events its indexer stores.
import type { TrendingPool } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import { getAddress, parseAbiItem, type PublicClient } from 'viem'
import type { PrismaClient } from '../generated/prisma/client.ts'
import type { TrendingSource } from '../providers/types.ts'
import type { DevnetPool, DevnetPools, PricedPool } from './pools.ts'
import { DAY_MS, percentChange, poolAsset, pricesDayBefore } from './prices.ts'

/** Uniswap V3's pool event (@uniswap/v3-core IUniswapV3PoolEvents). */
const uniswapSwap = parseAbiItem(
  'event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1, uint160 sqrtPriceX96, uint128 liquidity, int24 tick)',
)
/** Algebra Integral's (@cryptoalgebra/integral-core 1.2 IAlgebraPoolEvents): decoded on its own, in case a version adds fields. */
const algebraSwap = parseAbiItem(
  'event Swap(address indexed sender, address indexed recipient, int256 amount0, int256 amount1, uint160 price, uint128 liquidity, int24 tick)',
)

export interface SwapIndexerOptions {
  db: PrismaClient
  client: PublicClient
  pools: DevnetPools
  chainId: number
  log: Logger
  /** blocks read per round (2,000) */
  chunkBlocks?: number
}

/**
 * Stores the Swap events of the book's pools in swap_events, a chunk per round (docs/market-data.md,
 * "Trending pools"). Replicas may index at once: rows and the cursor only ever add.
 */
export function swapIndexer({ db, client, pools, chainId, log, chunkBlocks = 2000 }: SwapIndexerOptions) {
  const cursor = `swaps:${chainId}`

  async function swapLogs(watched: DevnetPool[], fromBlock: bigint, toBlock: bigint) {
    const read = async (dex: DevnetPool['dex'], event: typeof uniswapSwap | typeof algebraSwap) => {
      const address = watched.filter((pool) => pool.dex === dex).map((pool) => pool.address)
      // no address would mean every contract's logs
      if (address.length === 0) return []
      const logs = await client.getLogs({ address, event, fromBlock, toBlock, strict: true })
      return logs.map(({ address, blockNumber, logIndex, transactionHash, args }) => ({
        address,
        blockNumber,
        logIndex,
        transactionHash,
        amount0: args.amount0,
        amount1: args.amount1,
      }))
    }
    return (await Promise.all([read('uniswap', uniswapSwap), read('camelot', algebraSwap)])).flat()
  }

  async function restart(head: bigint, nextBlock: bigint) {
    log.warn(
      { cursor, nextBlock, head },
      'swap indexer: the chain is behind the cursor (restarted): its swaps are indexed again from block 0',
    )
    await db.$transaction([
      db.swapEvent.deleteMany({ where: { chainId } }),
      db.indexCursor.update({ where: { name: cursor }, data: { nextBlock: 0n } }),
    ])
  }

  return {
    /** one chunk; true while behind the head */
    async round(): Promise<boolean> {
      const watched = await pools.list()
      if (watched.length === 0) return false
      // the cursor first, then the head: another replica indexes only blocks the chain had, so a
      // head read after the cursor is never behind it unless the chain really restarted (read
      // together, a replica indexing past that head in between looked like a restart)
      const row = await db.indexCursor.findUnique({ where: { name: cursor } })
      const head = await client.getBlockNumber({ cacheTime: 0 })
      let from = row?.nextBlock ?? 0n
      if (from > head + 1n) {
        await restart(head, from)
        from = 0n
      }
      if (from > head) return false
      const last = from + BigInt(chunkBlocks) - 1n
      const to = last < head ? last : head

      const logs = await swapLogs(watched, from, to)
      const blocks = [...new Set(logs.map((log) => log.blockNumber))]
      const timestamps = new Map(
        await Promise.all(blocks.map(async (blockNumber) => [blockNumber, (await client.getBlock({ blockNumber })).timestamp] as const)),
      )
      await db.swapEvent.createMany({
        data: logs.map((log) => ({
          chainId,
          blockNumber: log.blockNumber,
          logIndex: log.logIndex,
          pool: getAddress(log.address),
          txHash: log.transactionHash,
          amount0: log.amount0.toString(),
          amount1: log.amount1.toString(),
          at: new Date(Number(timestamps.get(log.blockNumber)!) * 1000),
        })),
        skipDuplicates: true,
      })
      await db.$executeRaw`
        INSERT INTO index_cursors (name, next_block, updated_at) VALUES (${cursor}, ${to + 1n}, now())
        ON CONFLICT (name) DO UPDATE SET next_block = GREATEST(index_cursors.next_block, EXCLUDED.next_block), updated_at = now()`
      return to < head
    },
  }
}

/** USD with cents; below a dollar, four significant digits, so a small price keeps its precision. */
const usdString = (value: number) =>
  value >= 1 || value === 0 ? value.toFixed(2) : value.toFixed(Math.min(20, 3 - Math.floor(Math.log10(value))))
const percentString = (value: number) => {
  const fixed = value.toFixed(2)
  return fixed === '-0.00' ? '0.00' : fixed
}

/**
 * The book's pools by 24-hour USD volume (volumeOf), highest first, then by name; change24h by the
 * rule of pricesDayBefore. A pool whose base has no USD price is left out and logged.
 */
export function poolTrending({
  db,
  pools,
  chainId,
  log,
  now = Date.now,
}: {
  db: PrismaClient
  pools: DevnetPools
  chainId: number
  log: Logger
  now?: () => number
}): TrendingSource {
  return {
    name: 'pools',
    async trending(limit) {
      const at = now()
      const snapshot = await pools.snapshot()
      const [sums, then] = await Promise.all([
        db.$queryRaw<Array<{ pool: string; volume0: string; volume1: string }>>`
          SELECT pool, sum(abs(amount0))::text AS volume0, sum(abs(amount1))::text AS volume1
          FROM swap_events WHERE chain_id = ${chainId} AND at > ${new Date(at - DAY_MS)}
          GROUP BY pool`,
        pricesDayBefore(
          db,
          snapshot.pools.map((pool) => poolAsset(pool.address)),
          at,
        ),
      ])
      const volumes = new Map(sums.map((row) => [row.pool.toLowerCase(), row]))
      const unpriced: string[] = []
      const ranked = snapshot.pools.flatMap((pool) => {
        const basePrice = snapshot.usd(pool.base.address)
        if (basePrice === undefined) {
          unpriced.push(pool.name)
          return []
        }
        const volume = volumeOf(pool, volumes.get(pool.address.toLowerCase()), basePrice, snapshot.usd(pool.quote.address))
        const change = percentChange(pool.pairPrice, then.get(poolAsset(pool.address)))
        return [
          {
            volume,
            pool: {
              name: pool.name,
              basePrice: usdString(basePrice),
              volume24h: volume.toFixed(2),
              change24h: percentString(change),
              address: pool.address,
              dex: pool.dex,
            },
          },
        ]
      })
      if (unpriced.length > 0)
        log.warn({ pools: unpriced }, 'pools trending source: no USD price for the base of these pools; they are left out')
      ranked.sort((a, b) => b.volume - a.volume || (a.pool.name < b.pool.name ? -1 : a.pool.name > b.pool.name ? 1 : 0))
      return ranked.slice(0, limit).map(({ pool }): TrendingPool => pool)
    },
  }
}

/** USD through the pool: |amount| of its quote side at the quote's price (its base side at the base's when the quote has none). */
function volumeOf(
  pool: PricedPool,
  sums: { volume0: string; volume1: string } | undefined,
  basePrice: number,
  quotePrice: number | undefined,
): number {
  if (!sums) return 0
  const [token, price] = quotePrice === undefined ? [pool.base, basePrice] : [pool.quote, quotePrice]
  const raw = token === pool.token0 ? sums.volume0 : sums.volume1
  return (Number(raw) / 10 ** token.decimals) * price
}
