import { eip3009Abi } from '@ats/chain'
import type { Address, PublicClient } from 'viem'
import { PaymentUnavailableError } from './errors.ts'

export interface BalanceChecker {
  balanceOf(payer: Address): Promise<bigint>
}

export interface BalanceCheckerOptions {
  publicClient: Pick<PublicClient, 'readContract'>
  asset: Address
  ttlMs?: number
  now?: () => number
}

const maxEntries = 50_000

/**
 * The payer's token balance, cached briefly: a paying client sends many requests in a row and
 * each would otherwise cost an RPC call. Concurrent lookups for one payer share one call.
 */
export function createBalanceChecker({ publicClient, asset, ttlMs = 5_000, now = Date.now }: BalanceCheckerOptions): BalanceChecker {
  const cache = new Map<string, { balance: bigint; expires: number }>()
  const inFlight = new Map<string, Promise<bigint>>()
  return {
    balanceOf(payer) {
      const key = payer.toLowerCase()
      const hit = cache.get(key)
      if (hit && hit.expires > now()) return Promise.resolve(hit.balance)
      let pending = inFlight.get(key)
      if (!pending) {
        pending = publicClient
          .readContract({ address: asset, abi: eip3009Abi, functionName: 'balanceOf', args: [payer] })
          .then(
            (balance) => {
              if (cache.size >= maxEntries) cache.delete(cache.keys().next().value as string)
              cache.set(key, { balance, expires: now() + ttlMs })
              return balance
            },
            (error: Error) => {
              throw new PaymentUnavailableError(`balance lookup failed: ${error.message.split('\n')[0]}`, { cause: error })
            },
          )
          .finally(() => inFlight.delete(key))
        inFlight.set(key, pending)
      }
      return pending
    },
  }
}
