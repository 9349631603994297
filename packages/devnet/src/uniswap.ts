import { parseAbi, zeroAddress, type Address } from 'viem'
import { npmArtifact } from './artifacts.ts'
import { fullRangeMint, seedPools, type SeededPool } from './seed.ts'
import type { DeployerSession } from './session.ts'

export interface UniswapV3Addresses {
  factory: Address
  quoterV2: Address
  swapRouter02: Address
  positionManager: Address
  pools: {
    WETH_USDC_500: Address
    WBTC_USDC_3000: Address
    ARB_USDC_3000: Address
    WETH_ARB_3000: Address
    GMX_WETH_10000: Address
    USDT_USDC_500: Address
    LINK_USDC_3000: Address
  }
}

/** The factory's tick spacing for each fee tier it enables by default. */
const TICK_SPACING: Record<number, number> = { 500: 10, 3000: 60, 10000: 200 }

const npmAbi = parseAbi([
  'function createAndInitializePoolIfNecessary(address token0, address token1, uint24 fee, uint160 sqrtPriceX96) payable returns (address pool)',
  'struct MintParams { address token0; address token1; uint24 fee; int24 tickLower; int24 tickUpper; uint256 amount0Desired; uint256 amount1Desired; uint256 amount0Min; uint256 amount1Min; address recipient; uint256 deadline; }',
  'function mint(MintParams params) payable returns (uint256 tokenId, uint128 liquidity, uint256 amount0, uint256 amount1)',
])
const factoryAbi = parseAbi(['function getPool(address, address, uint24) view returns (address)'])

/** Uniswap V3 core + periphery + SwapRouter02 from their npm artifacts, and the seeded pools (see SEEDED_PAIRS). */
export async function deployUniswapV3(s: DeployerSession, weth: Address, seeded: readonly SeededPool[]): Promise<UniswapV3Addresses> {
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

  await seedPools(s, positionManager, npmAbi, seeded, {
    create: ({ position, uniswapFee }) => [position.token0, position.token1, uniswapFee, position.sqrtPrice],
    mint: ({ position, uniswapFee }) => {
      const tickSpacing = TICK_SPACING[uniswapFee]
      if (tickSpacing === undefined) throw new Error(`devnet deploy: no Uniswap V3 fee tier ${uniswapFee}`)
      return { ...fullRangeMint(position, tickSpacing, s.account.address), fee: uniswapFee }
    },
  })
  const addresses = await Promise.all(
    seeded.map(({ position, uniswapFee }) =>
      s.publicClient.readContract({
        address: factory,
        abi: factoryAbi,
        functionName: 'getPool',
        args: [position.token0, position.token1, uniswapFee],
      }),
    ),
  )
  const pools = Object.fromEntries(seeded.map(({ key, uniswapFee }, i) => [`${key}_${uniswapFee}`, addresses[i]!]))
  return { factory, quoterV2, swapRouter02, positionManager, pools: pools as UniswapV3Addresses['pools'] }
}
