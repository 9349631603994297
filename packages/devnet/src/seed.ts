import { encodeFunctionData, maxUint256, parseAbi, parseUnits, type Abi, type Address } from 'viem'
import type { Token } from '@ats/chain'
import { sendBatch, type BatchTx } from './funding.ts'
import type { DeployerSession } from './session.ts'
import { sortTokens, sqrtPriceX96 } from './price.ts'
import { tokenOf } from './tokens.ts'

/**
 * The pairs seeded on both DEXes, full range, each side worth about $3,000,000 (GMX/WETH $300,000):
 * `amountA` whole tokens of A, and `amountA × price` of B. WETH/ARB is WETH/USDC ÷ ARB/USDC.
 * Every core asset of GET /market/prices has a pool, so the local price source prices them all.
 * `key` names the pool in the book (Uniswap V3 appends the fee: WETH_USDC_500).
 */
export const SEEDED_PAIRS = [
  { key: 'WETH_USDC', a: 'WETH', b: 'USDC', price: '3000', amountA: '1000', uniswapFee: 500 },
  { key: 'WBTC_USDC', a: 'WBTC', b: 'USDC', price: '60000', amountA: '50', uniswapFee: 3000 },
  { key: 'ARB_USDC', a: 'ARB', b: 'USDC', price: '0.80', amountA: '3750000', uniswapFee: 3000 },
  { key: 'WETH_ARB', a: 'WETH', b: 'ARB', price: '3750', amountA: '1000', uniswapFee: 3000 },
  // GMX trades against WETH only (1% tier, about $300,000 a side): GMX/USDC routes through WETH
  { key: 'GMX_WETH', a: 'GMX', b: 'WETH', price: '0.01', amountA: '10000', uniswapFee: 10000 },
  { key: 'USDT_USDC', a: 'USDT', b: 'USDC', price: '1', amountA: '3000000', uniswapFee: 500 },
  { key: 'LINK_USDC', a: 'LINK', b: 'USDC', price: '15', amountA: '200000', uniswapFee: 3000 },
] as const

export type SeededPair = (typeof SEEDED_PAIRS)[number]

export const tokenAbi = parseAbi([
  'function mint(address to, uint256 amount)',
  'function approve(address spender, uint256 amount) returns (bool)',
  'function deposit() payable',
])

/** Uniswap V3's (and Algebra's) sqrt price bounds: MIN_SQRT_RATIO inclusive, MAX_SQRT_RATIO exclusive. */
const MIN_SQRT_RATIO = 4295128739n
const MAX_SQRT_RATIO = 1461446703485210103287273052203988822378723970342n

/** Widest tick range a pool with this spacing accepts (MIN_TICK/MAX_TICK = ±887272). */
export function fullRange(tickSpacing: number) {
  const max = Math.floor(887272 / tickSpacing) * tickSpacing
  return { tickLower: -max, tickUpper: max }
}

/** A decimal price (one whole A in whole B) as an exact positive rational: "0.80" is 80/100, "3750" is 3750/1. */
function toRational(price: string): { numerator: bigint; denominator: bigint } {
  const match = /^(\d+)(?:\.(\d+))?$/.exec(price.trim())
  if (!match) throw new Error(`devnet: not a decimal price: ${price}`)
  const fraction = match[2] ?? ''
  const numerator = BigInt(match[1]! + fraction)
  if (numerator === 0n) throw new Error(`devnet: price must be positive: ${price}`)
  return { numerator, denominator: 10n ** BigInt(fraction.length) }
}

/**
 * token0/token1, the initial sqrtPriceX96 and the desired amounts of a full-range position
 * in the pool of tokens A and B where one whole A is worth `price` whole B, holding
 * `amountA` raw units of A and the raw units of B worth as much (rounded down). All integer
 * math: the raw price is (numerator × 10^decimalsB) / (denominator × 10^decimalsA).
 */
export function poolPosition(tokenA: Address, decimalsA: number, tokenB: Address, decimalsB: number, price: string, amountA: bigint) {
  if (tokenA.toLowerCase() === tokenB.toLowerCase()) throw new Error('devnet: a pool needs two different tokens')
  const { numerator, denominator } = toRational(price)
  const rawA = denominator * 10n ** BigInt(decimalsA) // this many raw A …
  const rawB = numerator * 10n ** BigInt(decimalsB) // … are worth this many raw B
  const amountB = (amountA * rawB) / rawA
  if (amountA <= 0n || amountB <= 0n) throw new Error('devnet: a seeded position needs both tokens')
  const sqrtPrice = sqrtPriceX96(tokenA, rawA, tokenB, rawB)
  if (sqrtPrice < MIN_SQRT_RATIO || sqrtPrice >= MAX_SQRT_RATIO) throw new Error(`devnet: price ${price} is out of range`)
  const [token0, token1] = sortTokens(tokenA, tokenB)
  const [amount0Desired, amount1Desired] = token0 === tokenA ? [amountA, amountB] : [amountB, amountA]
  return { token0, token1, sqrtPrice, amount0Desired, amount1Desired }
}

export type PoolPosition = ReturnType<typeof poolPosition>

/** Each seeded pair with its tokens and the position seeded on each DEX. */
export function seededPools(tokens: readonly Token[]) {
  return SEEDED_PAIRS.map((pair) => {
    const a = tokenOf(tokens, pair.a)
    const b = tokenOf(tokens, pair.b)
    const position = poolPosition(a.address, a.decimals, b.address, b.decimals, pair.price, parseUnits(pair.amountA, a.decimals))
    return { ...pair, tokenA: a.address, tokenB: b.address, position }
  })
}

export type SeededPool = ReturnType<typeof seededPools>[number]

/** Raw units of each token (by address) the seeded positions of `dexes` DEXes take, at most. */
export function seedingNeeds(pools: readonly SeededPool[], dexes: number): Map<Address, bigint> {
  const needs = new Map<Address, bigint>()
  for (const { position } of pools) {
    needs.set(position.token0, (needs.get(position.token0) ?? 0n) + BigInt(dexes) * position.amount0Desired)
    needs.set(position.token1, (needs.get(position.token1) ?? 0n) + BigInt(dexes) * position.amount1Desired)
  }
  return needs
}

type Call = { address: Address; abi: Abi; functionName: string; args?: readonly unknown[]; value?: bigint }
const callData = (call: Call) =>
  encodeFunctionData({ abi: call.abi, functionName: call.functionName, args: call.args ?? [] } as Parameters<typeof encodeFunctionData>[0])

/**
 * Sends many calls from the deployer as one sendBatch, in order, each estimated against the
 * current state (so none may depend on another of the same batch) and padded 25%: anvil
 * estimates the exact minimum, and a pool's gas use can change with the block (its oracle looks
 * at the timestamp), so an unpadded estimate occasionally runs out of gas.
 */
export async function seedBatch(s: DeployerSession, calls: Call[]) {
  const txs: BatchTx[] = await Promise.all(
    calls.map(async (call) => {
      const request = { account: s.account.address, to: call.address, data: callData(call), value: call.value ?? 0n }
      const gas = await s.publicClient.estimateGas(request)
      return { to: request.to, data: request.data, value: request.value, gas: (gas * 125n) / 100n }
    }),
  )
  await sendBatch(s, txs)
}

/**
 * Creates every seeded pool and mints its full-range position through a DEX's position manager,
 * in two batches (a mint needs its pool): the approvals of every token and every pool, then every
 * position. `create` gives a pool's createAndInitializePoolIfNecessary arguments, `mint` its MintParams.
 */
export async function seedPools(
  s: DeployerSession,
  positionManager: Address,
  abi: Abi,
  pools: readonly SeededPool[],
  { create, mint }: { create: (pool: SeededPool) => readonly unknown[]; mint: (pool: SeededPool) => Record<string, unknown> },
) {
  const tokens = [...new Set(pools.flatMap(({ position }) => [position.token0, position.token1]))]
  const call = (functionName: string, args: readonly unknown[]) => ({ address: positionManager, abi, functionName, args })
  await seedBatch(s, [
    ...tokens.map((token) => ({ address: token, abi: tokenAbi, functionName: 'approve', args: [positionManager, maxUint256] })),
    ...pools.map((pool) => call('createAndInitializePoolIfNecessary', create(pool))),
  ])
  await seedBatch(
    s,
    pools.map((pool) => call('mint', [mint(pool)])),
  )
}

/** The mint parameters both position managers share: full range, the seeded amounts, to the deployer. */
export function fullRangeMint(position: PoolPosition, tickSpacing: number, recipient: Address) {
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
