import { gmxPositionStructs } from '@ats/chain'
import { parseAbi, parseUnits, type Address } from 'viem'
import { localArtifact } from './artifacts.ts'
import type { DeployerSession } from './session.ts'

/** DevPositions' owner-only setters. */
export const positionsAdminAbi = parseAbi([
  ...gmxPositionStructs,
  'function setAccountData(address user, uint256 totalCollateralBase, uint256 totalDebtBase, uint256 liquidationThresholdBps, uint256 ltvBps)',
  'function addPosition(Props position)',
])

/** Seeded Aave account: $10,000 collateral, $2,500 debt (8 decimals), ltv 80%, threshold 85%. */
export const SEEDED_LENDING = {
  totalCollateralBase: parseUnits('10000', 8),
  totalDebtBase: parseUnits('2500', 8),
  currentLiquidationThreshold: 8500n,
  ltv: 8000n,
  /** 10,000 × 80% − 2,500 */
  availableBorrowsBase: parseUnits('5500', 8),
  /** 10,000 × 85% / 2,500 = 3.4, in wad */
  healthFactor: parseUnits('3.4', 18),
} as const

/**
 * Seeded GMX position: long $15,000 (USD with 30 decimals, as GMX stores it) of 5 ETH at
 * $3,000, backed by 5,000 units of a 6-decimals collateral token (3x leverage).
 */
export const SEEDED_PERP = {
  sizeInUsd: parseUnits('15000', 30),
  sizeInTokens: parseUnits('5', 18),
  collateralAmount: parseUnits('5000', 6),
  isLong: true,
} as const

/**
 * Deploys DevPositions (answers the Aave V3 Pool getUserAccountData and GMX V2 Reader
 * getAccountPositions ABIs) and gives serverWallet one lending and one long perp position.
 */
export async function deployPositions(
  s: DeployerSession,
  serverWallet: Address,
  markets: { market: Address; collateralToken: Address },
): Promise<Address> {
  const artifact = localArtifact('DevPositions')
  const address = await s.deploy(artifact)
  const L = SEEDED_LENDING
  await s.write({
    address,
    abi: positionsAdminAbi,
    functionName: 'setAccountData',
    args: [serverWallet, L.totalCollateralBase, L.totalDebtBase, L.currentLiquidationThreshold, L.ltv],
  })
  const { timestamp } = await s.publicClient.getBlock()
  const position = {
    addresses: { account: serverWallet, market: markets.market, collateralToken: markets.collateralToken },
    numbers: {
      sizeInUsd: SEEDED_PERP.sizeInUsd,
      sizeInTokens: SEEDED_PERP.sizeInTokens,
      collateralAmount: SEEDED_PERP.collateralAmount,
      pendingImpactAmount: 0n,
      borrowingFactor: 0n,
      fundingFeeAmountPerSize: 0n,
      longTokenClaimableFundingAmountPerSize: 0n,
      shortTokenClaimableFundingAmountPerSize: 0n,
      increasedAtTime: timestamp,
      decreasedAtTime: 0n,
    },
    flags: { isLong: SEEDED_PERP.isLong },
  }
  await s.write({ address, abi: positionsAdminAbi, functionName: 'addPosition', args: [position] })
  return address
}
