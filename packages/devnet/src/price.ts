/** Integer square root (floor) of a non-negative bigint. */
export function sqrtBigInt(value: bigint): bigint {
  if (value < 0n) throw new Error('sqrt of negative')
  if (value < 2n) return value
  let x = value
  let y = (x + 1n) / 2n
  while (y < x) {
    x = y
    y = (x + value / x) / 2n
  }
  return x
}

/**
 * Uniswap/Algebra sqrtPriceX96 for a pool of tokens a and b where `amountA` raw units of a
 * are worth `amountB` raw units of b. The pool's price is token1 per token0, with token0
 * the lower address, so the ratio is flipped when b sorts first.
 */
export function sqrtPriceX96(tokenA: string, amountA: bigint, tokenB: string, amountB: bigint): bigint {
  const aIsToken0 = tokenA.toLowerCase() < tokenB.toLowerCase()
  const [amount0, amount1] = aIsToken0 ? [amountA, amountB] : [amountB, amountA]
  return sqrtBigInt((amount1 << 192n) / amount0)
}

export function sortTokens<T extends string>(a: T, b: T): [T, T] {
  return a.toLowerCase() < b.toLowerCase() ? [a, b] : [b, a]
}
