// Amounts as clients send them (strings of base units), read into chain values: here, beside the
// chain's other rules, and not in the kit, since it is about what a uint256 may hold.
import { InvalidAmount } from './errors.ts'

/** A positive integer amount in base units (a uint256), or a 400 that says what is wrong with it. */
export function parseAmount(field: string, raw: string): bigint {
  if (!/^[0-9]{1,78}$/.test(raw)) {
    throw new InvalidAmount(`${field} must be a positive integer in base units (e.g. "1000000" for 1 USDC), got "${raw}"`)
  }
  const amount = BigInt(raw)
  if (amount === 0n) throw new InvalidAmount(`${field} must be greater than 0`)
  if (amount >= 2n ** 256n) throw new InvalidAmount(`${field} does not fit in a uint256`)
  return amount
}
