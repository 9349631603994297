/** How admin shows USDC amounts to people. */

/** USDC base units (6 decimals) as dollars: 10000n -> "$0.01", 1234567n -> "$1.234567", 0n -> "$0.00". */
export function formatUsd(baseUnits: bigint): string {
  const negative = baseUnits < 0n
  const abs = negative ? -baseUnits : baseUnits
  const whole = abs / 1_000_000n
  let fraction = (abs % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '')
  if (fraction.length < 2) fraction = fraction.padEnd(2, '0')
  return `${negative ? '-' : ''}$${whole}.${fraction}`
}
