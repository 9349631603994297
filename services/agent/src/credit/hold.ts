// The credit hold a credit-paid request carries (headers set by the gateway, stripped from
// clients): the wallet paying, the hold's id and the most the work may cost. The job the request
// starts keeps it, and its end reports how much of the hold the work used (credit/usageReports.ts).
import { creditHeaders } from '@ats/contracts'
import type { FastifyRequest } from 'fastify'
import { isAddress } from 'viem'
import { MalformedCreditHold } from '../errors.ts'

export interface CreditHold {
  /** the paying wallet, lower-case */
  wallet: string
  /** the hold's id (the gateway's request id) */
  hold: string
  /** the most the work may cost, USDC base units */
  amount: bigint
}

const holdId = /^[\x21-\x7e]{1,64}$/
const amountPattern = /^[1-9][0-9]{0,18}$/
const maxAmount = 9_223_372_036_854_775_807n

/** A request header's value, when it has one (not empty). */
export const headerOf = (request: FastifyRequest, name: string) => {
  const value = request.headers[name]
  return typeof value === 'string' && value !== '' ? value : undefined
}

/** The credit wallet of a credit-paid request (any route), lower-case, when the gateway named one. */
export function creditWalletOf(request: FastifyRequest): string | undefined {
  const wallet = headerOf(request, creditHeaders.wallet)
  return wallet && isAddress(wallet, { strict: false }) ? wallet.toLowerCase() : undefined
}

/**
 * The hold of a request whose metered work is paid by credit; undefined when it has none. A hold
 * named with a wallet or amount that cannot be read is refused (400): the gateway sets them.
 */
export function creditHoldOf(request: FastifyRequest): CreditHold | undefined {
  const hold = headerOf(request, creditHeaders.hold)
  if (hold === undefined) return undefined
  const wallet = creditWalletOf(request)
  const amount = headerOf(request, creditHeaders.holdAmount)
  if (!holdId.test(hold) || !wallet || !amount || !amountPattern.test(amount) || BigInt(amount) > maxAmount) {
    throw new MalformedCreditHold()
  }
  return { wallet, hold, amount: BigInt(amount) }
}
