import type { Network, PaymentRequired, PaymentRequirements, PaymentRequirementsV1 } from '@x402/core/types'
import { Type } from 'typebox'

/**
 * What a 402 offers and what a facilitator settles, in x402's own types (@x402/core):
 * the requirements of one paid request in both protocol versions.
 */
type Address = `0x${string}`

/** The body of a 402 answer (x402 v1), as documented in OpenAPI. */
export const PaymentRequiredSchema = Type.Object(
  {
    x402Version: Type.Literal(1),
    error: Type.String({ description: 'what is wrong with the payment, or that one is required' }),
    accepts: Type.Array(
      Type.Object({
        scheme: Type.Literal('exact'),
        network: Type.String({ description: 'arbitrum (42161), anvil (31337), or a CAIP-2 id' }),
        maxAmountRequired: Type.String({ description: 'USDC base units' }),
        resource: Type.String(),
        description: Type.String(),
        mimeType: Type.String(),
        payTo: Type.String(),
        maxTimeoutSeconds: Type.Integer(),
        asset: Type.String({ description: 'the USDC contract' }),
        extra: Type.Object({ name: Type.String(), version: Type.String() }, { description: "the asset's EIP-712 domain" }),
      }),
    ),
  },
  { description: 'x402 v1 payment requirements; the same, as x402 v2, base64 in the PAYMENT-REQUIRED header' },
)

/** What a paid route charges and where the money goes. */
export interface PaymentTerms {
  /** USDC base units (6 decimals): 10000 = $0.01 */
  price: bigint
  payTo: Address
  /** the USDC contract */
  asset: Address
  chainId: number
  /** absolute URL of the paid resource */
  resource: string
  description: string
  maxTimeoutSeconds: number
  /** the asset's EIP-712 domain name and version */
  token: { name: string; version: string }
  mimeType?: string
  /** x402 v2 extensions of the 402 answer, e.g. bazaar discovery */
  extensions?: Record<string, unknown>
}

/** x402 v1 requirements as we offer them: the reference type, without the optional `outputSchema`. */
export type OfferedRequirementsV1 = Omit<PaymentRequirementsV1, 'outputSchema'>

/** The CAIP-2 chain id x402 v2 uses as `network`. */
export const caip2Network = (chainId: number): Network => `eip155:${chainId}`

/**
 * x402 v1 names networks by a short name. @x402/evm's v1 table (EVM_NETWORK_CHAIN_ID_MAP) has
 * no entry for Arbitrum or a local chain, so these names are ours; chains we have no name for
 * fall back to their CAIP-2 id, which x402's generic chain-id parser also accepts.
 */
const v1Names: Record<number, string> = { 42161: 'arbitrum', 421614: 'arbitrum-sepolia', 31337: 'anvil' }

export const v1Network = (chainId: number): string => v1Names[chainId] ?? caip2Network(chainId)

const mimeTypeOf = (terms: PaymentTerms) => terms.mimeType ?? 'application/json'

export function paymentRequirementsV1(terms: PaymentTerms): OfferedRequirementsV1 {
  return {
    scheme: 'exact',
    // v1 short names are not CAIP-2; the reference type spells every network as one
    network: v1Network(terms.chainId) as Network,
    maxAmountRequired: terms.price.toString(),
    resource: terms.resource,
    description: terms.description,
    mimeType: mimeTypeOf(terms),
    payTo: terms.payTo,
    maxTimeoutSeconds: terms.maxTimeoutSeconds,
    asset: terms.asset,
    extra: { name: terms.token.name, version: terms.token.version },
  }
}

export function paymentRequirementsV2(terms: PaymentTerms): PaymentRequirements {
  return {
    scheme: 'exact',
    network: caip2Network(terms.chainId),
    amount: terms.price.toString(),
    asset: terms.asset,
    payTo: terms.payTo,
    maxTimeoutSeconds: terms.maxTimeoutSeconds,
    extra: { name: terms.token.name, version: terms.token.version },
  }
}

/** The body of a 402 answer (x402 v1). */
export function paymentRequiredBody(
  terms: PaymentTerms,
  error: string,
): { x402Version: 1; error: string; accepts: OfferedRequirementsV1[] } {
  return { x402Version: 1, error, accepts: [paymentRequirementsV1(terms)] }
}

export function paymentRequiredV2(terms: PaymentTerms, error: string): PaymentRequired {
  return {
    x402Version: 2,
    error,
    resource: { url: terms.resource, description: terms.description, mimeType: mimeTypeOf(terms) },
    accepts: [paymentRequirementsV2(terms)],
    ...(terms.extensions ? { extensions: terms.extensions } : {}),
  }
}

/** The value of the `PAYMENT-REQUIRED` header of a 402 answer (x402 v2): base64 of the JSON. */
export function paymentRequiredHeader(terms: PaymentTerms, error: string): string {
  return Buffer.from(JSON.stringify(paymentRequiredV2(terms, error))).toString('base64')
}

/** The `description` of what a paid request buys, as offered in 402 answers and sent to facilitators. */
export const paidRequestDescription = 'Agent Trading Service: one agent request'
