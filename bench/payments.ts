import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'
import { createAuthorizationSigning } from '../gateway/src/payments/signature.ts'

/**
 * Signed x402 v1 `X-PAYMENT` headers for the bench, made fast: viem's signTypedData costs
 * milliseconds in pure JS, far too slow for the tens of thousands of payments a run spends
 * (every paid request claims its nonce, so no header can be sent twice). Here each payment is
 * the gateway's own EIP-712 digest (createAuthorizationSigning) signed by native libsecp256k1.
 */

// secp256k1 is a dependency of the gateway, not of the root package that runs the bench
interface Secp256k1 {
  ecdsaSign(message: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recid: number }
}
// viem's Address and Hex (viem is not a dependency of the root package either)
type Hex = `0x${string}`
type Address = Hex

const secp = createRequire(new URL('../gateway/package.json', import.meta.url))('secp256k1') as Secp256k1

export interface PaymentSigner {
  address: Address
  privateKey: Hex
}

export interface SignPaymentsOptions {
  /** how many headers */
  count: number
  /** signers used round-robin */
  payers: PaymentSigner[]
  payTo: Address
  /** the USDC contract (EIP-712 verifyingContract) */
  usdc: Address
  chainId: number
  /** USDC base units per payment */
  value: bigint
  /** unix seconds */
  validAfter: bigint
  validBefore: bigint
}

/** `count` distinct signed payments (random nonces), as base64 X-PAYMENT header values. */
export function signPayments({ count, payers, payTo, usdc, chainId, value, validAfter, validBefore }: SignPaymentsOptions): string[] {
  if (payers.length === 0) throw new Error('signPayments: no payers')
  const signing = createAuthorizationSigning({ name: 'USD Coin', version: '2', chainId, verifyingContract: usdc })
  const keys = payers.map((p) => Buffer.from(p.privateKey.slice(2), 'hex'))
  const froms = payers.map((p) => p.address.toLowerCase() as Hex)
  const to = payTo.toLowerCase() as Hex
  const network = `eip155:${chainId}`
  // 16 random bytes per run, then a counter: distinct within the run and from every earlier run
  const prefix = randomBytes(16).toString('hex')
  const headers = new Array<string>(count)
  for (let i = 0; i < count; i++) {
    const p = i % payers.length
    const authorization = {
      from: froms[p]!,
      to,
      value,
      validAfter,
      validBefore,
      nonce: `0x${prefix}${i.toString(16).padStart(32, '0')}` as Hex,
    }
    const { signature, recid } = secp.ecdsaSign(signing.digest(authorization), keys[p]!)
    const sig = `0x${Buffer.from(signature).toString('hex')}${(27 + recid).toString(16)}`
    const header = {
      x402Version: 1,
      scheme: 'exact',
      network,
      payload: {
        signature: sig,
        authorization: {
          from: authorization.from,
          to,
          value: String(value),
          validAfter: String(validAfter),
          validBefore: String(validBefore),
          nonce: authorization.nonce,
        },
      },
    }
    headers[i] = Buffer.from(JSON.stringify(header)).toString('base64')
  }
  return headers
}
