// The address book's pools as the local market sources see them: their tokens and names, their mid prices now, and the USD prices that follow.
import { algebraPoolAbi, uniswapPoolAbi, type AddressBook, type Token } from '@ats/chain'
import type { DexName } from '@ats/contracts'
import { getAddress, type Address, type PublicClient } from 'viem'

export interface DevnetPool {
  address: Address
  dex: DexName
  /** the pool's own order: token0 has the lower address */
  token0: Token
  token1: Token
  /** hundredths of a basis point (500 = 0.05%); Camelot (Algebra) charges a dynamic fee */
  fee: number | 'dynamic'
  /** the pair as a person names it (see quoteRank): base first */
  base: Token
  quote: Token
  /** "WETH / USDC 0.05%" (Uniswap V3), "WETH / USDC" (Camelot) */
  name: string
}

export interface PricedPool extends DevnetPool {
  /** whole token1 per whole token0, from slot0's sqrtPriceX96 (Algebra: globalState's price) */
  midPrice: number
  /** whole quote per whole base: the pair's price as named (WETH / USDC: USDC per WETH) */
  pairPrice: number
}

/** Every pool priced at one moment, and the USD prices of the book's tokens that follow from them. */
export interface PoolSnapshot {
  pools: PricedPool[]
  /** the book's tokens */
  tokens: readonly Token[]
  /** USD per whole token; undefined when no pool leads to USDC */
  usd(token: Address): number | undefined
}

/**
 * How strongly a token is the quote of a pair (lower: more): a person reads "WETH / USDC" and
 * "ARB / WETH", not the other way round. Dollars first, then WETH; a pair of two other tokens
 * keeps the pool's order (token0 / token1).
 */
const QUOTES = ['USDC', 'USDT', 'DAI', 'USDC.e', 'WETH']
const quoteRank = (token: Token) => {
  const rank = QUOTES.indexOf(token.symbol)
  return rank === -1 ? QUOTES.length : rank
}

const Q96 = 2 ** 96

/** whole token1 per whole token0 */
export function midPriceOf(sqrtPriceX96: bigint, token0: Token, token1: Token): number {
  return (Number(sqrtPriceX96) / Q96) ** 2 * 10 ** (token0.decimals - token1.decimals)
}

const feeLabel = (fee: number) => `${fee / 10_000}%`

/**
 * The pools of the address book (uniswapV3.pools and algebra.pools: the devnet's seeded ones),
 * read lazily: `book` is called on first use. A pool with a token the book does not list is
 * left out. USDC is the dollar: USDC = 1 by definition; a token with a USDC pool is priced
 * from it, else through its WETH pool; Uniswap's pool is preferred when both DEXes have one.
 * Reads go through viem's batching transport (the devnet has no Multicall3).
 */
export function devnetPools(client: PublicClient, book: () => AddressBook) {
  let loading: Promise<DevnetPool[]> | undefined

  async function load(): Promise<DevnetPool[]> {
    const { uniswapV3, algebra, tokens } = book()
    const entries = [
      ...Object.values(uniswapV3.pools ?? {}).map((address) => ({ address: getAddress(address), dex: 'uniswap' as const })),
      ...Object.values(algebra.pools ?? {}).map((address) => ({ address: getAddress(address), dex: 'camelot' as const })),
    ]
    const tokenOf = (address: Address) => tokens.find((token) => token.address.toLowerCase() === address.toLowerCase())
    const pools = await Promise.all(
      entries.map(async ({ address, dex }): Promise<DevnetPool | undefined> => {
        const abi = dex === 'uniswap' ? uniswapPoolAbi : algebraPoolAbi
        const [address0, address1, fee] = await Promise.all([
          client.readContract({ address, abi, functionName: 'token0' }),
          client.readContract({ address, abi, functionName: 'token1' }),
          dex === 'uniswap' ? client.readContract({ address, abi: uniswapPoolAbi, functionName: 'fee' }) : ('dynamic' as const),
        ])
        const token0 = tokenOf(address0)
        const token1 = tokenOf(address1)
        if (!token0 || !token1) return undefined
        const [base, quote] = quoteRank(token0) < quoteRank(token1) ? [token1, token0] : [token0, token1]
        const name = `${base.symbol} / ${quote.symbol}${fee === 'dynamic' ? '' : ` ${feeLabel(fee)}`}`
        return { address, dex, token0, token1, fee, base, quote, name }
      }),
    )
    return pools.filter((pool) => pool !== undefined)
  }

  /** the book's pools, Uniswap's first; read from the chain once, on first use */
  const list = () => {
    loading ??= load().catch((error: unknown) => {
      loading = undefined
      throw error
    })
    return loading
  }

  async function sqrtPriceOf({ address, dex }: DevnetPool): Promise<bigint> {
    if (dex === 'uniswap') return (await client.readContract({ address, abi: uniswapPoolAbi, functionName: 'slot0' }))[0]
    return (await client.readContract({ address, abi: algebraPoolAbi, functionName: 'globalState' }))[0]
  }

  return {
    list,
    /** every pool's mid price now (one batched read) */
    async snapshot(): Promise<PoolSnapshot> {
      const pools = await list()
      const sqrtPrices = await Promise.all(pools.map(sqrtPriceOf))
      const priced = pools.map((pool, i): PricedPool => {
        const midPrice = midPriceOf(sqrtPrices[i]!, pool.token0, pool.token1)
        return { ...pool, midPrice, pairPrice: pool.base === pool.token0 ? midPrice : 1 / midPrice }
      })
      const { tokens } = book()
      return { pools: priced, tokens, usd: usdPrices(priced, tokens) }
    },
  }
}
export type DevnetPools = ReturnType<typeof devnetPools>

/** What one whole `token` is worth in whole `other`, from the first pool of the pair (Uniswap's first). */
function priceIn(pools: PricedPool[], token: Address, other: Address): number | undefined {
  const same = (a: Token, b: Address) => a.address.toLowerCase() === b.toLowerCase()
  const pool = pools.find((p) => (same(p.token0, token) && same(p.token1, other)) || (same(p.token1, token) && same(p.token0, other)))
  if (!pool) return undefined
  return same(pool.token0, token) ? pool.midPrice : 1 / pool.midPrice
}

function usdPrices(pools: PricedPool[], tokens: readonly Token[]): (token: Address) => number | undefined {
  const usdc = tokens.find((token) => token.symbol === 'USDC')?.address
  const weth = tokens.find((token) => token.symbol === 'WETH')?.address
  const wethUsd = usdc && weth ? priceIn(pools, weth, usdc) : undefined
  return (token) => {
    if (!usdc) return undefined
    if (token.toLowerCase() === usdc.toLowerCase()) return 1
    const direct = priceIn(pools, token, usdc)
    if (direct !== undefined) return direct
    const inWeth = weth ? priceIn(pools, token, weth) : undefined
    return inWeth !== undefined && wethUsd !== undefined ? inWeth * wethUsd : undefined
  }
}
