import { LRUCache } from 'lru-cache'
import { getAddress, type Address } from 'viem'
import { PaymentRefused } from '../errors.ts'
import type { Payment } from './header.ts'
import type { Reservations } from './reservations.ts'
import { caip2Network, v1Network, type PaymentTerms } from '@ats/contracts'
import { createAuthorizationSigning } from './signature.ts'

export type PaymentVerifierOptions = {
  requirements: Pick<PaymentTerms, 'price' | 'payTo' | 'asset' | 'chainId' | 'token' | 'maxTimeoutSeconds'>
  /** why a payer (lower-case address) is refused outright, or undefined */
  refusedPayer?: (payer: string) => string | undefined
  /** validBefore must be at least this far ahead, so the payment can still settle (6 s) */
  minValiditySeconds?: number
  /**
   * the nonce unused on chain, and the balance minus what the payer's unsettled payments reserve,
   * checked with the nonce claim and the reservation in one step (Redis, for every gateway)
   */
  reservations: Reservations
}

/**
 * Verifies an x402 `exact` payment at the edge, cheapest checks first; the nonce is claimed
 * last so that a refused payment does not burn it.
 */
export function createPaymentVerifier(options: PaymentVerifierOptions) {
  const { requirements: r, refusedPayer = () => undefined, minValiditySeconds = 6, reservations } = options
  const signing = createAuthorizationSigning({ ...r.token, chainId: r.chainId, verifyingContract: r.asset })
  const networks = new Set([caip2Network(r.chainId), v1Network(r.chainId)])
  const payTo = r.payTo.toLowerCase()
  const asset = r.asset.toLowerCase()
  // validBefore may be at most this far ahead: it bounds how long a nonce is kept
  const maxValidity = BigInt(r.maxTimeoutSeconds + 600)
  const minValidity = BigInt(minValiditySeconds)

  // a checksum is a keccak; paying clients come back, so remember theirs
  const checksums = new LRUCache<string, Address>({ max: 50_000, memoMethod: (lower) => getAddress(lower) })

  /**
   * Everything but the balance and the nonce: the payer's checksummed address, or a PaymentRefused
   * saying what is wrong. `now` in unix seconds; `price` the request's when it sets its own (a
   * top-up's amount), else the route's.
   */
  function check(payment: Payment, now: number | bigint, price = r.price): Address {
    const t = BigInt(Math.floor(Number(now)))
    const a = payment.authorization
    if (!networks.has(payment.network))
      throw new PaymentRefused('wrong_network', `wrong network: '${payment.network}'; this API is paid on ${[...networks].join(' / ')}`)
    if (payment.asset !== undefined && payment.asset !== asset)
      throw new PaymentRefused('wrong_asset', `wrong asset: ${payment.asset}; pay in ${r.asset}`)
    if (a.to !== payTo) throw new PaymentRefused('wrong_recipient', `wrong recipient: authorization.to ${a.to} is not payTo ${r.payTo}`)
    if (a.value < price) throw new PaymentRefused('amount_too_low', `amount too low: ${a.value} < ${price}`)
    if (a.validAfter > t) throw new PaymentRefused('not_yet_valid', `not yet valid: validAfter ${a.validAfter} is after now (${t})`)
    if (a.validBefore <= t) throw new PaymentRefused('expired', `expired: validBefore ${a.validBefore} is not after now (${t})`)
    if (a.validBefore <= t + minValidity)
      throw new PaymentRefused(
        'expired',
        `expires too soon: validBefore ${a.validBefore} must be more than ${minValidity} s after now (${t})`,
      )
    if (a.validBefore > t + maxValidity)
      throw new PaymentRefused(
        'validity_too_long',
        `valid too long: validBefore ${a.validBefore} is more than ${maxValidity} s after now (${t})`,
      )

    const signer = signing.recover(a, payment.signature)
    if (signer !== a.from)
      throw new PaymentRefused(
        'signer_mismatch',
        `invalid signature: signed by ${getAddress(signer)}, not by authorization.from ${getAddress(a.from)}`,
      )

    const payer = checksums.memo(a.from)
    const refused = refusedPayer(a.from)
    if (refused !== undefined)
      throw new PaymentRefused('payer_blocked', `payer refused: ${payer} has a payment that could not settle (${refused})`, payer)
    return payer
  }

  /** The payer's checksummed address once the payment is checked, funded and its nonce claimed; else a PaymentRefused. */
  async function verify(payment: Payment, now: number | bigint, price = r.price): Promise<Address> {
    const payer = check(payment, now, price)
    if ((await reservations.reserve(payment, payer)).kind !== 'ok') throw nonceUsed(payment, payer)
    return payer
  }

  return { check, verify }
}

export type PaymentVerifier = ReturnType<typeof createPaymentVerifier>

/** A replay: the signer's own payment sent again, so the refusal counts against that payer. */
export const nonceUsed = (payment: Payment, payer: Address) =>
  new PaymentRefused('nonce_used', `nonce already used: ${payment.authorization.nonce} from ${payer}`, payer)
