import { eip3009Abi } from '@ats/chain'
import { cachedLoader, firstLine } from '@ats/service-kit'
import type { Address, PublicClient } from 'viem'
import { PaymentUnavailableError } from '../errors.ts'

export interface BalanceChecker {
  balanceOf(payer: Address): Promise<bigint>
}

export interface BalanceCheckerOptions {
  publicClient: Pick<PublicClient, 'readContract'>
  asset: Address
  ttlMs?: number
  now?: () => number
}

/**
 * The payer's token balance, cached briefly: a paying client sends many requests in a row and
 * each would otherwise cost an RPC call. Concurrent lookups for one payer share one call.
 */
export function createBalanceChecker({ publicClient, asset, ttlMs = 5_000, now }: BalanceCheckerOptions): BalanceChecker {
  const balances = cachedLoader<Address, bigint>({
    max: 50_000,
    ttlMs,
    ...(now ? { now } : {}),
    load: (payer) =>
      publicClient.readContract({ address: asset, abi: eip3009Abi, functionName: 'balanceOf', args: [payer] }).catch((error: Error) => {
        throw new PaymentUnavailableError(`balance lookup failed: ${firstLine(error)}`, { cause: error })
      }),
  })
  return { balanceOf: (payer) => balances.get(payer.toLowerCase() as Address) }
}
