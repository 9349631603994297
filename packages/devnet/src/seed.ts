import { encodeFunctionData, maxUint256, parseAbi, parseUnits, type Abi, type Address } from 'viem'
import type { DeployerSession } from './session.ts'
import { sortTokens, sqrtPriceX96 } from './price.ts'

export const WETH_PRICE_USDC = 3000n
/** What each seeded WETH/USDC pool holds: 1000 WETH and 3,000,000 USDC, full range. */
export const POOL_WETH = parseUnits('1000', 18)
export const POOL_USDC = parseUnits('3000000', 6)

export const tokenAbi = parseAbi([
  'function mint(address to, uint256 amount)',
  'function approve(address spender, uint256 amount) returns (bool)',
  'function deposit() payable',
])

/** Widest tick range a pool with this spacing accepts (MIN_TICK/MAX_TICK = ±887272). */
export function fullRange(tickSpacing: number) {
  const max = Math.floor(887272 / tickSpacing) * tickSpacing
  return { tickLower: -max, tickUpper: max }
}

/** token0/token1, the initial price and the desired amounts of a WETH/USDC pool. */
export function wethUsdcPosition(weth: Address, usdc: Address) {
  const [token0, token1] = sortTokens(weth, usdc)
  const [amount0Desired, amount1Desired] = token0 === weth ? [POOL_WETH, POOL_USDC] : [POOL_USDC, POOL_WETH]
  const sqrtPrice = sqrtPriceX96(weth, parseUnits('1', 18), usdc, WETH_PRICE_USDC * 10n ** 6n)
  return { token0, token1, sqrtPrice, amount0Desired, amount1Desired }
}

/**
 * Sends one call from the deployer with a gas limit 25% over the estimate and waits for it.
 * anvil estimates the exact minimum, and a pool's gas use can change with the block (its
 * oracle looks at the timestamp), so an unpadded estimate occasionally runs out of gas.
 */
export async function seedWrite(
  s: DeployerSession,
  call: { address: Address; abi: Abi; functionName: string; args?: readonly unknown[]; value?: bigint },
) {
  const data = encodeFunctionData({ abi: call.abi, functionName: call.functionName, args: call.args ?? [] } as Parameters<typeof encodeFunctionData>[0])
  const request = { account: s.account, to: call.address, data, value: call.value ?? 0n }
  const gas = ((await s.publicClient.estimateGas(request)) * 125n) / 100n
  const hash = await s.wallet.sendTransaction({ ...request, gas })
  const receipt = await s.publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 })
  if (receipt.status !== 'success') throw new Error(`devnet deploy: ${call.functionName} (${hash}) reverted`)
}

/** Lets the position manager take both tokens of the seeded pool. */
export async function approvePositionManager(s: DeployerSession, positionManager: Address, tokens: Address[]) {
  for (const token of tokens) {
    await seedWrite(s, { address: token, abi: tokenAbi, functionName: 'approve', args: [positionManager, maxUint256] })
  }
}

/** The mint parameters both position managers share: full range, the seeded amounts, to the deployer. */
export function fullRangeMint(position: ReturnType<typeof wethUsdcPosition>, tickSpacing: number, recipient: Address) {
  return {
    token0: position.token0,
    token1: position.token1,
    ...fullRange(tickSpacing),
    amount0Desired: position.amount0Desired,
    amount1Desired: position.amount1Desired,
    amount0Min: 0n,
    amount1Min: 0n,
    recipient,
    deadline: maxUint256,
  }
}
