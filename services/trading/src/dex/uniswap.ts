import { uniswapFactoryAbi, uniswapPoolAbi, uniswapQuoterV2PathAbi, uniswapSwapRouter02PathAbi, type AddressBook } from '@ats/chain'
import { cachedLoader } from '@ats/service-kit'
import { concatHex, encodeFunctionData, numberToHex, zeroAddress, type Address, type Hex, type PublicClient } from 'viem'
import type { Dex, Hop } from './types.ts'

/** The fee tiers Uniswap V3's factory enables: 0.01%, 0.05%, 0.3%, 1%. */
export const UNISWAP_FEE_TIERS = [100, 500, 3000, 10000] as const

/** Uniswap V3 path bytes: tokenIn ‖ fee (uint24) ‖ token ‖ … ‖ tokenOut. */
export function uniswapPath(path: Hop[]): Hex {
  return concatHex([path[0]!.tokenIn, ...path.flatMap((hop) => [numberToHex(hop.fee, { size: 3 }), hop.tokenOut])])
}

export function uniswapDex(client: PublicClient, book: AddressBook['uniswapV3']): Dex {
  // a pool, once created, exists for good; "none" is looked at again after a minute
  const pools = cachedLoader<string, Address>({
    max: 10_000,
    ttlMs: 24 * 3600_000,
    ttlOf: (pool) => (pool === zeroAddress ? 60_000 : 24 * 3600_000),
    load: async (key) => {
      const [a, b, fee] = key.split(':') as [Address, Address, string]
      return client.readContract({ address: book.factory, abi: uniswapFactoryAbi, functionName: 'getPool', args: [a, b, Number(fee)] })
    },
  })
  const poolsOf = async (a: Address, b: Address): Promise<Hop[]> => {
    const found = await Promise.all(UNISWAP_FEE_TIERS.map(async (fee) => ({ fee, pool: await pools.get(`${a}:${b}:${fee}`) })))
    return found.filter(({ pool }) => pool !== zeroAddress).map(({ fee, pool }) => ({ tokenIn: a, tokenOut: b, pool, fee }))
  }

  return {
    name: 'uniswap',
    router: book.swapRouter02,
    async paths(tokenIn, tokenOut, via) {
      const direct = await poolsOf(tokenIn, tokenOut)
      if (direct.length > 0 || tokenIn === via || tokenOut === via) return direct.map((hop) => [hop])
      const [first, second] = await Promise.all([poolsOf(tokenIn, via), poolsOf(via, tokenOut)])
      return first.flatMap((a) => second.map((b) => [a, b]))
    },
    async quote(path, amountIn, blockNumber) {
      try {
        const { result } = await client.simulateContract({
          address: book.quoterV2,
          abi: uniswapQuoterV2PathAbi,
          functionName: 'quoteExactInput',
          args: [uniswapPath(path), amountIn],
          blockNumber,
        })
        return { amountOut: result[0], fees: path.map((hop) => hop.fee) }
      } catch {
        return undefined
      }
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
