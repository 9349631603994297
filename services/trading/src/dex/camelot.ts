import { algebraFactoryAbi, algebraPoolAbi, algebraQuoterV2PathAbi, algebraSwapRouterPathAbi, type AddressBook } from '@ats/chain'
import { concatHex, encodeFunctionData, zeroAddress, type Address, type Hex, type PublicClient } from 'viem'
import { poolCache, type Dex, type Hop } from './types.ts'

/** Algebra Integral path bytes: tokenIn ‖ deployer ‖ token ‖ … ‖ tokenOut; the zero deployer names a pair's ordinary pool. */
export function algebraPath(path: Hop[]): Hex {
  return concatHex([path[0]!.tokenIn, ...path.flatMap((hop) => [zeroAddress, hop.tokenOut])])
}

/** Camelot: Algebra Integral, one pool per pair with a dynamic fee (the quoter says what it charged). */
export function camelotDex(client: PublicClient, book: AddressBook['algebra']): Dex {
  const pools = poolCache(async (key) => {
    const [a, b] = key.split(':') as [Address, Address]
    return client.readContract({ address: book.factory, abi: algebraFactoryAbi, functionName: 'poolByPair', args: [a, b] })
  })
  return {
    name: 'camelot',
    router: book.swapRouter,
    encodePath: algebraPath,
    async pools(a, b) {
      const pool = await pools.get(a.toLowerCase() < b.toLowerCase() ? `${a}:${b}` : `${b}:${a}`)
      return pool === zeroAddress ? [] : [{ tokenIn: a, tokenOut: b, pool, fee: 0 }]
    },
    async quote(path, amountIn, blockNumber) {
      const { result } = await client.simulateContract({
        address: book.quoterV2,
        abi: algebraQuoterV2PathAbi,
        functionName: 'quoteExactInput',
        args: [algebraPath(path), amountIn],
        blockNumber,
      })
      const [amountOutList, amountInList, , , , feeList] = result
      // each hop says what it took: less than it was given means its pool ran dry (an amount that
      // takes a pool exactly to its limit is all used, so the price alone does not say it)
      const given = [amountIn, ...amountOutList.slice(0, -1)]
      const partial = amountInList.some((used, i) => used < given[i]!)
      return {
        amountOut: amountOutList[amountOutList.length - 1]!,
        fees: feeList.map(Number),
        partial,
        amountInUsed: partial && path.length === 1 ? amountInList[0] : undefined,
      }
    },
    async sqrtPriceX96(pool, blockNumber) {
      const [price] = await client.readContract({ address: pool, abi: algebraPoolAbi, functionName: 'globalState', blockNumber })
      return price
    },
    swapCall(path, amountIn, minOut, recipient, deadline) {
      return encodeFunctionData({
        abi: algebraSwapRouterPathAbi,
        functionName: 'exactInput',
        args: [{ path: algebraPath(path), recipient, deadline, amountIn, amountOutMinimum: minOut }],
      })
    },
  }
}
