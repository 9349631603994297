import type { Address } from 'viem'
import { anvil } from 'viem/chains'
import { localArtifact } from './artifacts.ts'
import { deployAlgebra, type AlgebraAddresses } from './algebra.ts'
import { POOL_USDC, POOL_WETH, tokenAbi } from './seed.ts'
import { deployerSession } from './session.ts'
import { deployUniswapV3, type UniswapV3Addresses } from './uniswap.ts'

export interface AddressBook {
  chainId: number
  tokens: Record<'WETH' | 'USDC' | 'ARB', Address>
  uniswapV3: UniswapV3Addresses
  algebra: AlgebraAddresses
}

/**
 * Deploys tokens, Uniswap V3 and Algebra Integral onto a fresh anvil and seeds a WETH/USDC
 * pool on each. Every transaction comes from the deployer account in a fixed order, so on
 * a fresh chain the addresses are the same on every run.
 */
export async function deployDevnet(rpcUrl: string): Promise<AddressBook> {
  const s = deployerSession(rpcUrl)
  const token = localArtifact('DevToken')
  const weth = await s.deploy(localArtifact('WrappedEther'))
  const usdc = await s.deploy(token, ['USD Coin', 'USDC', 6])
  const arb = await s.deploy(token, ['Arbitrum', 'ARB', 18])

  // Enough for both seeded pools.
  await s.write({ address: weth, abi: tokenAbi, functionName: 'deposit', value: 2n * POOL_WETH })
  await s.write({ address: usdc, abi: tokenAbi, functionName: 'mint', args: [s.account.address, 2n * POOL_USDC] })

  const uniswapV3 = await deployUniswapV3(s, weth, usdc)
  const algebra = await deployAlgebra(s, weth, usdc)
  return { chainId: anvil.id, tokens: { WETH: weth, USDC: usdc, ARB: arb }, uniswapV3, algebra }
}
