import { uniswapFactoryAbi, uniswapPoolAbi, uniswapQuoterV2PathAbi, uniswapSwapRouter02PathAbi, type AddressBook } from '@ats/chain'
import { concatHex, encodeFunctionData, numberToHex, zeroAddress, type Address, type Hex, type PublicClient } from 'viem'
import { poolCache, type Dex, type Hop } from './types.ts'

/** The fee tiers Uniswap V3's factory enables: 0.01%, 0.05%, 0.3%, 1%. */
export const UNISWAP_FEE_TIERS = [100, 500, 3000, 10000] as const

/** The price limits a swap without its own limit stops at (Uniswap V3 TickMath's MIN_SQRT_RATIO + 1 and MAX_SQRT_RATIO - 1). */
const SQRT_PRICE_LIMITS = new Set([4295128739n + 1n, 1461446703485210103287273052203988822378723970342n - 1n])

/** Whether a hop's price after the swap is at a limit: the pool ran out of liquidity before amountIn was used. */
export const atPriceLimit = (sqrtPricesAfter: readonly bigint[]) => sqrtPricesAfter.some((price) => SQRT_PRICE_LIMITS.has(price))

/** Uniswap V3 path bytes: tokenIn ‖ fee (uint24) ‖ token ‖ … ‖ tokenOut. */
export function uniswapPath(path: Hop[]): Hex {
  return concatHex([path[0]!.tokenIn, ...path.flatMap((hop) => [numberToHex(hop.fee, { size: 3 }), hop.tokenOut])])
}

export function uniswapDex(client: PublicClient, book: AddressBook['uniswapV3']): Dex {
  const pools = poolCache(async (key) => {
    const [a, b, fee] = key.split(':') as [Address, Address, string]
    return client.readContract({ address: book.factory, abi: uniswapFactoryAbi, functionName: 'getPool', args: [a, b, Number(fee)] })
  })
  return {
    name: 'uniswap',
    router: book.swapRouter02,
    encodePath: uniswapPath,
    async pools(a, b) {
      const found = await Promise.all(UNISWAP_FEE_TIERS.map(async (fee) => ({ fee, pool: await pools.get(`${a}:${b}:${fee}`) })))
      return found.filter(({ pool }) => pool !== zeroAddress).map(({ fee, pool }) => ({ tokenIn: a, tokenOut: b, pool, fee }))
    },
    async quote(path, amountIn, blockNumber) {
      const { result } = await client.simulateContract({
        address: book.quoterV2,
        abi: uniswapQuoterV2PathAbi,
        functionName: 'quoteExactInput',
        args: [uniswapPath(path), amountIn],
        blockNumber,
      })
      // QuoterV2 does not say what it took of amountIn; a hop at its price limit says it was not all
      return { amountOut: result[0], fees: path.map((hop) => hop.fee), partial: atPriceLimit(result[1]) }
    },
    async sqrtPriceX96(pool, blockNumber) {
      const [sqrtPrice] = await client.readContract({ address: pool, abi: uniswapPoolAbi, functionName: 'slot0', blockNumber })
      return sqrtPrice
    },
    swapCall(path, amountIn, minOut, recipient, deadline) {
      // SwapRouter02's exactInput has no deadline of its own: multicall(deadline, …) carries it
      const swap = encodeFunctionData({
        abi: uniswapSwapRouter02PathAbi,
        functionName: 'exactInput',
        args: [{ path: uniswapPath(path), recipient, amountIn, amountOutMinimum: minOut }],
      })
      return encodeFunctionData({ abi: uniswapSwapRouter02PathAbi, functionName: 'multicall', args: [deadline, [swap]] })
    },
  }
}
