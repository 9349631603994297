import type { Token } from '@ats/chain'
import type { DexName, Quote } from '@ats/contracts'
import { BadRequest, cachedLoader, createError, parseAmount } from '@ats/service-kit'
import type { PublicClient } from 'viem'
import { isRevert, rethrowAsChainError } from '../chainTx.ts'
import { midPriceOut, pathsOf, priceImpactBps, type Dex, type Hop } from '../dex/types.ts'
import type { TokenResolver } from './tokens.ts'

/** A quoter that reverts has no liquidity on that path (undefined); any other failure is thrown on. */
const unlessRevert = (error: unknown): undefined => {
  if (isRevert(error)) return undefined
  throw error
}

export const NoRoute = createError<[string]>('ATS_ERR_TRADING_NO_ROUTE', '%s', 422)

/** The best path for an amount at one block: what the quote cache keeps. */
interface BestPath {
  amountOut: bigint
  /** what amountIn buys at the mid prices before the trade, after fees */
  midAmountOut: bigint
  /** what amountIn is worth at the mid prices before the trade, fees not taken: its value in tokenOut */
  spotAmountOut: bigint
  path: Hop[]
  fees: number[]
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
      let best: (typeof quoted)[number] | undefined
      for (const candidate of quoted) {
        if (candidate.quote && (!best?.quote || candidate.quote.amountOut > best.quote.amountOut)) best = candidate
      }
      if (!best?.quote || best.quote.amountOut === 0n) return null
      const { path, quote } = best
      const prices = await Promise.all(path.map((hop) => sqrtPrices.get(`${dexName}:${hop.pool}:${block}`)))
      return {
        amountOut: quote.amountOut,
        midAmountOut: midPriceOut(path, prices, quote.fees, amountIn),
        spotAmountOut: midPriceOut(path, prices, quote.fees.map(() => 0), amountIn),
        path,
        fees: quote.fees,
      }
    },
  })

  /** The request's tokens and amount, or a 400 that says what is wrong. */
  async function check(request: QuoteRequest) {
    const amountIn = parseAmount('amountIn', request.amountIn)
    const [tokenIn, tokenOut] = await Promise.all([tokens.resolve('tokenIn', request.tokenIn), tokens.resolve('tokenOut', request.tokenOut)])
    if (tokenIn.address === tokenOut.address) throw new BadRequest('tokenIn and tokenOut are the same token')
    return { amountIn, tokenIn, tokenOut }
  }

  async function quoteAt(request: QuoteRequest, blockNumber: bigint | undefined): Promise<RoutedQuote> {
    const dexName = request.dex ?? 'uniswap'
    const { amountIn, tokenIn, tokenOut } = await check(request)
    const block = blockNumber ?? (await latestBlock.get('latest').catch(rethrowAsChainError))
    const found = await quotes.get(`${dexName}:${tokenIn.address}:${tokenOut.address}:${amountIn}:${block}`).catch(rethrowAsChainError)
    if (!found) {
      throw new NoRoute(
        `no route from ${tokenIn.symbol} to ${tokenOut.symbol} on ${dexName}: no pool with liquidity for this amount, directly or through WETH`,
      )
    }
    return { ...found, dex: dexes[dexName], tokenIn, tokenOut, amountIn, blockNumber: BigInt(block) }
  }

  return {
    check,
    /** a quote at the latest block known (at most blockCacheMs old) */
    quote: (request: QuoteRequest) => quoteAt(request, undefined),
    /** a quote at a given block */
    quoteAt: (request: QuoteRequest, blockNumber: bigint) => quoteAt(request, blockNumber),
    /** a quote at the chain's head right now, for execution */
    quoteFresh: async (request: QuoteRequest) => quoteAt(request, await client.getBlockNumber({ cacheTime: 0 }).catch(rethrowAsChainError)),
  }
}

export type Quoter = ReturnType<typeof createQuoter>

/** The public answer of a quote. */
export function quoteAnswer(q: RoutedQuote): Quote {
  return {
    dex: q.dex.name,
    tokenIn: q.tokenIn.symbol,
    tokenOut: q.tokenOut.symbol,
    amountIn: q.amountIn.toString(),
    amountOut: q.amountOut.toString(),
    priceImpactBps: priceImpactBps(q.midAmountOut, q.amountOut),
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
