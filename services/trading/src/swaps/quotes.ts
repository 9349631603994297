import { parseAmount, type Token } from '@ats/chain'
import type { DexName, Quote } from '@ats/contracts'
import { BadRequest, cachedLoader } from '@ats/service-kit'
import { formatUnits, type PublicClient } from 'viem'
import { isRevert, rethrowAsChainError } from '../chainTx.ts'
import { NoRoute, TooLarge } from '../errors.ts'
import { midPriceOut, pathsOf, priceImpactBps, type Dex, type Hop, type PathQuote } from '../dex/types.ts'
import type { TokenResolver } from './tokens.ts'

/** A quoter that reverts has no liquidity on that path (undefined); any other failure is thrown on. */
const unlessRevert = (error: unknown): undefined => {
  if (isRevert(error)) return undefined
  throw error
}

/**
 * The largest amount (within about 0.1%, rounded down) the path takes whole: the amount the
 * quoter itself reports when it can, else a bisection on its own answer, first on the number's
 * size, then on its value: about 20 quotes at one block, only for amounts the pools cannot absorb.
 */
export async function fillableAmount(
  quote: (amountIn: bigint) => Promise<PathQuote | undefined>,
  amountIn: bigint,
  first: PathQuote,
): Promise<bigint> {
  if (first.amountInUsed !== undefined) return first.amountInUsed
  const fills = async (amount: bigint) => {
    const q = await quote(amount)
    return q !== undefined && !q.partial && q.amountOut > 0n
  }
  // 2^low fills, 2^high does not (or is past amountIn)
  let [low, high] = [-1, amountIn.toString(2).length]
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2)
    if (await fills(1n << BigInt(mid))) low = mid
    else high = mid
  }
  if (low < 0) return 0n
  let [lo, hi] = [1n << BigInt(low), 1n << BigInt(high)]
  if (hi > amountIn) hi = amountIn
  while ((hi - lo) * 1024n > lo) {
    const mid = (lo + hi) / 2n
    if (await fills(mid)) lo = mid
    else hi = mid
  }
  return lo
}

/** The best path for an amount at one block: what the quote cache keeps. */
interface BestPath {
  amountOut: bigint
  /** what amountIn buys at the mid prices before the trade, after fees */
  midAmountOut: bigint
  /** what amountIn is worth at the mid prices before the trade, fees not taken: its value in tokenOut */
  spotAmountOut: bigint
  path: Hop[]
  fees: number[]
  /** set when the pools cannot take all of amountIn: the largest amount that fills */
  fillable?: bigint | undefined
}

/** A quote with what executing it needs: the DEX, the tokens and the path. */
export interface RoutedQuote extends BestPath {
  dex: Dex
  tokenIn: Token
  tokenOut: Token
  amountIn: bigint
  blockNumber: bigint
}

export interface QuoteRequest {
  tokenIn: string
  tokenOut: string
  amountIn: string
  dex?: DexName | undefined
}

export interface QuoteOptions {
  client: PublicClient
  dexes: Record<DexName, Dex>
  tokens: TokenResolver
  /** how long the latest block number is reused before asking the chain again */
  blockCacheMs: number
}

/**
 * Quotes on the chain's own quoters, cached per block: a quote is a function of the chain
 * state at one block, so the same question in the same block is answered from memory. The
 * block number itself is asked at most once per `blockCacheMs` (a quote may be that much
 * behind the head); execution quotes at a block read just before.
 */
export function createQuoter({ client, dexes, tokens, blockCacheMs }: QuoteOptions) {
  const latestBlock = cachedLoader<'latest', bigint>({ max: 1, ttlMs: blockCacheMs, load: () => client.getBlockNumber({ cacheTime: 0 }) })
  const sqrtPrices = cachedLoader<string, bigint>({
    max: 5_000,
    ttlMs: 60_000,
    load: async (key) => {
      const [dex, pool, block] = key.split(':') as [DexName, `0x${string}`, string]
      return dexes[dex].sqrtPriceX96(pool, BigInt(block))
    },
  })
  const quotes = cachedLoader<string, BestPath | null>({
    max: 20_000,
    ttlMs: 60_000,
    load: async (key) => {
      const [dexName, inAddress, outAddress, amount, block] = key.split(':') as [DexName, `0x${string}`, `0x${string}`, string, string]
      const dex = dexes[dexName]
      const blockNumber = BigInt(block)
      const amountIn = BigInt(amount)
      const paths = await pathsOf(dex, inAddress, outAddress, tokens.weth().address)
      // an RPC failure rejects the load, so it is not cached as "no route"
      const quoted = await Promise.all(
        paths.map(async (path) => ({ path, quote: await dex.quote(path, amountIn, blockNumber).catch(unlessRevert) })),
      )
      // the best output among the paths that take all of amountIn; only when none does, the best partial one
      let best: { path: Hop[]; quote: PathQuote } | undefined
      for (const { path, quote } of quoted) {
        if (!quote || quote.amountOut === 0n) continue
        const better =
          !best ||
          (best.quote.partial && !quote.partial) ||
          (best.quote.partial === quote.partial && quote.amountOut > best.quote.amountOut)
        if (better) best = { path, quote }
      }
      if (!best) return null
      const { path, quote } = best
      const prices = await Promise.all(path.map((hop) => sqrtPrices.get(`${dexName}:${hop.pool}:${block}`)))
      const fillable = quote.partial
        ? await fillableAmount((amount) => dex.quote(path, amount, blockNumber).catch(unlessRevert), amountIn, quote)
        : undefined
      const noFees = quote.fees.map(() => 0)
      return {
        amountOut: quote.amountOut,
        midAmountOut: midPriceOut(path, prices, quote.fees, amountIn),
        spotAmountOut: midPriceOut(path, prices, noFees, amountIn),
        path,
        fees: quote.fees,
        fillable,
      }
    },
  })

  /** The request's tokens and amount, or a 400 that says what is wrong. */
  async function check(request: QuoteRequest) {
    const amountIn = parseAmount('amountIn', request.amountIn)
    const [tokenIn, tokenOut] = await Promise.all([
      tokens.resolve('tokenIn', request.tokenIn),
      tokens.resolve('tokenOut', request.tokenOut),
    ])
    if (tokenIn.address === tokenOut.address) throw new BadRequest('tokenIn and tokenOut are the same token')
    return { amountIn, tokenIn, tokenOut }
  }

  /** `partial` lets through a quote the pools cannot absorb whole (what valuing a swap needs: its mid price). */
  async function quoteAt(request: QuoteRequest, blockNumber: bigint | undefined, mode: { partial?: boolean } = {}): Promise<RoutedQuote> {
    const dexName = request.dex ?? 'uniswap'
    const { amountIn, tokenIn, tokenOut } = await check(request)
    const block = blockNumber ?? (await latestBlock.get('latest').catch(rethrowAsChainError))
    const found = await quotes.get(`${dexName}:${tokenIn.address}:${tokenOut.address}:${amountIn}:${block}`).catch(rethrowAsChainError)
    if (!found) {
      throw new NoRoute(
        `no route from ${tokenIn.symbol} to ${tokenOut.symbol} on ${dexName}: no pool with liquidity for this amount, directly or through WETH`,
      )
    }
    if (found.fillable !== undefined && !mode.partial) {
      const about = (amount: bigint) => `${Number(formatUnits(amount, tokenIn.decimals)).toPrecision(4)} ${tokenIn.symbol}`
      throw new TooLarge(
        `amountIn ${amountIn} (${about(amountIn)}) is more than the pools on ${dexName} can absorb from ${tokenIn.symbol} to ${tokenOut.symbol}: ` +
          `at most ${found.fillable} (${about(found.fillable)}) fills; a larger amount would stop at the end of the pools' liquidity`,
      )
    }
    return { ...found, dex: dexes[dexName], tokenIn, tokenOut, amountIn, blockNumber: BigInt(block) }
  }

  return {
    check,
    /** a quote at the latest block known (at most blockCacheMs old) */
    quote: (request: QuoteRequest) => quoteAt(request, undefined),
    /** a quote at a given block */
    quoteAt,
    /** a quote at the chain's head right now, for execution */
    quoteFresh: async (request: QuoteRequest) => quoteAt(request, await client.getBlockNumber({ cacheTime: 0 }).catch(rethrowAsChainError)),
  }
}

export type Quoter = ReturnType<typeof createQuoter>

/** The price impact of a quote in basis points (the pools' fees not counted). */
export const impactOf = (q: Pick<RoutedQuote, 'midAmountOut' | 'amountOut'>) => priceImpactBps(q.midAmountOut, q.amountOut)

/** The public answer of a quote, with whether its impact is over the default ceiling. */
export function quoteAnswer(q: RoutedQuote, impactCeilingBps: number): Quote {
  const impact = impactOf(q)
  return {
    dex: q.dex.name,
    tokenIn: q.tokenIn.symbol,
    tokenOut: q.tokenOut.symbol,
    amountIn: q.amountIn.toString(),
    amountOut: q.amountOut.toString(),
    priceImpactBps: impact,
    priceImpactCeilingBps: impactCeilingBps,
    exceedsPriceImpactCeiling: impact > impactCeilingBps,
    route: routeOf(q),
    pools: q.path.map((hop) => hop.pool),
    fees: q.fees,
    blockNumber: q.blockNumber.toString(),
  }
}

/** The path as symbols: ["ARB", "WETH", "WBTC"] (the only token paths go through is WETH). */
export function routeOf(q: Pick<RoutedQuote, 'tokenIn' | 'tokenOut' | 'path'>): string[] {
  return q.path.length > 1 ? [q.tokenIn.symbol, 'WETH', q.tokenOut.symbol] : [q.tokenIn.symbol, q.tokenOut.symbol]
}
