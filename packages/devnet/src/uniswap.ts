import { parseAbi, zeroAddress, type Address } from 'viem'
import { npmArtifact } from './artifacts.ts'
import { approvePositionManager, seedWrite, fullRangeMint, wethUsdcPosition } from './seed.ts'
import type { DeployerSession } from './session.ts'

export interface UniswapV3Addresses {
  factory: Address
  quoterV2: Address
  swapRouter02: Address
  positionManager: Address
  pools: { WETH_USDC_500: Address }
}

const FEE_500 = 500
const TICK_SPACING_500 = 10

const npmAbi = parseAbi([
  'function createAndInitializePoolIfNecessary(address token0, address token1, uint24 fee, uint160 sqrtPriceX96) payable returns (address pool)',
  'struct MintParams { address token0; address token1; uint24 fee; int24 tickLower; int24 tickUpper; uint256 amount0Desired; uint256 amount1Desired; uint256 amount0Min; uint256 amount1Min; address recipient; uint256 deadline; }',
  'function mint(MintParams params) payable returns (uint256 tokenId, uint128 liquidity, uint256 amount0, uint256 amount1)',
])
const factoryAbi = parseAbi(['function getPool(address, address, uint24) view returns (address)'])

/** Uniswap V3 core + periphery + SwapRouter02 from their npm artifacts, and a seeded WETH/USDC 0.05% pool. */
export async function deployUniswapV3(s: DeployerSession, weth: Address, usdc: Address): Promise<UniswapV3Addresses> {
  const factory = await s.deploy(npmArtifact('@uniswap/v3-core', 'contracts/UniswapV3Factory.sol/UniswapV3Factory'))
  // No token descriptor: only tokenURI() needs it, and nothing on the devnet calls that.
  const positionManager = await s.deploy(
    npmArtifact('@uniswap/v3-periphery', 'contracts/NonfungiblePositionManager.sol/NonfungiblePositionManager'),
    [factory, weth, zeroAddress],
  )
  const quoterV2 = await s.deploy(npmArtifact('@uniswap/v3-periphery', 'contracts/lens/QuoterV2.sol/QuoterV2'), [factory, weth])
  const swapRouter02 = await s.deploy(
    npmArtifact('@uniswap/swap-router-contracts', 'contracts/SwapRouter02.sol/SwapRouter02'),
    [zeroAddress, factory, positionManager, weth], // no Uniswap V2 on the devnet
  )

  await approvePositionManager(s, positionManager, [weth, usdc])
  const position = wethUsdcPosition(weth, usdc)
  await seedWrite(s, {
    address: positionManager,
    abi: npmAbi,
    functionName: 'createAndInitializePoolIfNecessary',
    args: [position.token0, position.token1, FEE_500, position.sqrtPrice],
  })
  await seedWrite(s, {
    address: positionManager,
    abi: npmAbi,
    functionName: 'mint',
    args: [{ ...fullRangeMint(position, TICK_SPACING_500, s.account.address), fee: FEE_500 }],
  })
  const pool = await s.publicClient.readContract({ address: factory, abi: factoryAbi, functionName: 'getPool', args: [weth, usdc, FEE_500] })
  return { factory, quoterV2, swapRouter02, positionManager, pools: { WETH_USDC_500: pool } }
}
