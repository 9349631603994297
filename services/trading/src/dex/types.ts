import type { DexName } from '@ats/contracts'
import { cachedLoader } from '@ats/service-kit'
import { zeroAddress, type Address, type Hex } from 'viem'

/** One pool on a path. `fee` is in hundredths of a basis point (500 = 0.05%); Algebra's is read from its quoter. */
export interface Hop {
  tokenIn: Address
  tokenOut: Address
  pool: Address
  fee: number
}

/** A path's quote at one block: the quoter's output and the fee each hop charged. */
export interface PathQuote {
  amountOut: bigint
  fees: number[]
  /** a hop reached its price limit: the path cannot take all of amountIn (amountOut is what the part it takes buys) */
  partial: boolean
  /** when partial, what the path took of amountIn, if the quoter says (Algebra, one hop) */
  amountInUsed?: bigint | undefined
}

/**
 * What the quote and swap code needs of a DEX; Uniswap V3 and Camelot (Algebra Integral)
 * implement it. Every read takes the block it reads at, so answers can be cached per block.
 */
export interface Dex {
  name: DexName
  router: Address
  /** the pools that trade tokenA for tokenB, as hops in that direction (none: []) */
  pools(tokenA: Address, tokenB: Address): Promise<Hop[]>
  /** the DEX quoter's answer for the path; throws viem's error when the quoter reverts (no liquidity) or the RPC fails */
  quote(path: Hop[], amountIn: bigint, blockNumber: bigint): Promise<PathQuote>
  /** the pool's sqrt price (Q64.96 of token1 per token0) at the block */
  sqrtPriceX96(pool: Address, blockNumber: bigint): Promise<bigint>
  /** the router's path bytes of the hops (what TradeGrants passes to the router) */
  encodePath(path: Hop[]): Hex
  /** calldata for the router: swap amountIn along the path, at least minOut to recipient, before the deadline */
  swapCall(path: Hop[], amountIn: bigint, minOut: bigint, recipient: Address, deadline: bigint): Hex
}

/** Pool addresses by key: a pool, once created, exists for good (kept a day); "none" (the zero address) is asked again after a minute. */
export function poolCache(lookup: (key: string) => Promise<Address>) {
  return cachedLoader<string, Address>({
    max: 10_000,
    ttlMs: 24 * 3600_000,
    ttlOf: (pool) => (pool === zeroAddress ? 60_000 : 24 * 3600_000),
    load: lookup,
  })
}

/** The paths from tokenIn to tokenOut: every direct pool, or, when there is none, every two-hop path through `via` (WETH). */
export async function pathsOf(dex: Dex, tokenIn: Address, tokenOut: Address, via: Address): Promise<Hop[][]> {
  const direct = await dex.pools(tokenIn, tokenOut)
  if (direct.length > 0 || tokenIn === via || tokenOut === via) return direct.map((hop) => [hop])
  const [first, second] = await Promise.all([dex.pools(tokenIn, via), dex.pools(via, tokenOut)])
  return first.flatMap((a) => second.map((b) => [a, b]))
}

const Q192 = 1n << 192n

/**
 * What `amountIn` buys along the path at the pools' mid prices before the trade, after each
 * hop's fee: the quoter's answer with no price impact. Integer math on sqrtPriceX96.
 */
export function midPriceOut(path: Hop[], sqrtPrices: bigint[], fees: number[], amountIn: bigint): bigint {
  let amount = amountIn
  path.forEach((hop, i) => {
    const sqrt = sqrtPrices[i]!
    const zeroForOne = hop.tokenIn.toLowerCase() < hop.tokenOut.toLowerCase()
    const squared = sqrt * sqrt
    amount = zeroForOne ? (amount * squared) / Q192 : (amount * Q192) / squared
    amount = (amount * BigInt(1_000_000 - fees[i]!)) / 1_000_000n
  })
  return amount
}

/** Price impact in basis points (never negative): how far amountOut falls short of the mid-price output. */
export function priceImpactBps(midOut: bigint, amountOut: bigint): number {
  if (midOut <= 0n || amountOut >= midOut) return 0
  return Number(((midOut - amountOut) * 10_000n) / midOut)
}
