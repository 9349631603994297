import { getContractAddress, parseAbi, zeroAddress, type Address } from 'viem'
import { npmArtifact } from './artifacts.ts'
import { fullRangeMint, seedPools, type SeededPool } from './seed.ts'
import type { DeployerSession } from './session.ts'

export interface AlgebraAddresses {
  factory: Address
  poolDeployer: Address
  quoterV2: Address
  swapRouter: Address
  positionManager: Address
  pools: {
    WETH_USDC: Address
    WBTC_USDC: Address
    ARB_USDC: Address
    WETH_ARB: Address
    GMX_WETH: Address
    USDT_USDC: Address
    LINK_USDC: Address
  }
}

const npmAbi = parseAbi([
  'function createAndInitializePoolIfNecessary(address token0, address token1, address deployer, uint160 sqrtPriceX96, bytes data) payable returns (address pool)',
  'struct MintParams { address token0; address token1; address deployer; int24 tickLower; int24 tickUpper; uint256 amount0Desired; uint256 amount1Desired; uint256 amount0Min; uint256 amount1Min; address recipient; uint256 deadline; }',
  'function mint(MintParams params) payable returns (uint256 tokenId, uint128 liquidity, uint256 amount0, uint256 amount1)',
])
const factoryAbi = parseAbi([
  'function defaultTickspacing() view returns (int24)',
  'function poolByPair(address, address) view returns (address)',
])

/** Algebra Integral (Camelot's current AMM engine) from its npm artifacts, and the seeded pools (see SEEDED_PAIRS). */
export async function deployAlgebra(s: DeployerSession, weth: Address, seeded: readonly SeededPool[]): Promise<AlgebraAddresses> {
  // The factory and the pool deployer each take the other's address: the deployer is the
  // next contract this account creates, so its address follows from the nonce.
  const nonce = await s.publicClient.getTransactionCount({ address: s.account.address })
  const expectedPoolDeployer = getContractAddress({ from: s.account.address, nonce: BigInt(nonce + 1) })
  const factory = await s.deploy(npmArtifact('@cryptoalgebra/integral-core', 'contracts/AlgebraFactory.sol/AlgebraFactory'), [
    expectedPoolDeployer,
  ])
  const poolDeployer = await s.deploy(
    npmArtifact('@cryptoalgebra/integral-core', 'contracts/AlgebraPoolDeployer.sol/AlgebraPoolDeployer'),
    [factory],
  )
  if (poolDeployer !== expectedPoolDeployer) throw new Error('devnet deploy: Algebra pool deployer address mismatch')
  const positionManager = await s.deploy(
    npmArtifact('@cryptoalgebra/integral-periphery', 'contracts/NonfungiblePositionManager.sol/NonfungiblePositionManager'),
    [factory, weth, zeroAddress, poolDeployer],
  )
  const quoterV2 = await s.deploy(npmArtifact('@cryptoalgebra/integral-periphery', 'contracts/lens/QuoterV2.sol/QuoterV2'), [
    factory,
    weth,
    poolDeployer,
  ])
  const swapRouter = await s.deploy(
    npmArtifact('@cryptoalgebra/integral-periphery', 'contracts/SwapRouter.sol/SwapRouter'),
    [factory, weth, poolDeployer], // (factory, WNativeToken, poolDeployer)
  )

  const tickSpacing = await s.publicClient.readContract({ address: factory, abi: factoryAbi, functionName: 'defaultTickspacing' })
  // deployer = zero address selects the factory's ordinary (non-custom) pools
  await seedPools(s, positionManager, npmAbi, seeded, {
    create: ({ position }) => [position.token0, position.token1, zeroAddress, position.sqrtPrice, '0x'],
    mint: ({ position }) => ({ ...fullRangeMint(position, tickSpacing, s.account.address), deployer: zeroAddress }),
  })
  const addresses = await Promise.all(
    seeded.map(({ position }) =>
      s.publicClient.readContract({
        address: factory,
        abi: factoryAbi,
        functionName: 'poolByPair',
        args: [position.token0, position.token1],
      }),
    ),
  )
  const pools = Object.fromEntries(seeded.map(({ key }, i) => [key, addresses[i]!]))
  return { factory, poolDeployer, quoterV2, swapRouter, positionManager, pools: pools as AlgebraAddresses['pools'] }
}
