// A v2 payment says what it was made for: the `resource` of the 402 it answers and the
// requirements it `accepted`. Both must be those of the request it comes with, or it is refused
// before its nonce is claimed (as x402 resource servers are asked to check). v1 payments carry
// neither. Neither is covered by the EIP-3009 signature: this catches a payment made for one
// route and sent to another, not a client that rewrites what it says.
import { paymentRequirementsV2, type PaymentTerms } from '@ats/contracts'
import { PaymentRefused } from '../errors.ts'
import type { AcceptedRequirements, Payment } from './header.ts'

interface PaymentBindingOptions {
  requirements: Omit<PaymentTerms, 'resource' | 'description'>
  /** PUBLIC_URL: when set, a resource must name it; unset, gateways name themselves by their port, and the path is compared */
  publicUrl: string | undefined
  /** the other resources a route is sold as (the MCP tools that call it, `mcp://tool/<name>`) */
  otherResources: (method: string, path: string) => readonly string[]
}

/** The request a payment comes with: its method and path, the resource its 402 names, and its price when not the route's. */
interface PaidRequest {
  method: string
  path: string
  resource: string
  /** a price set by the request itself (a top-up's amount) */
  price?: bigint
}

const pathOf = (url: string) => {
  try {
    return new URL(url).pathname
  } catch {
    return undefined
  }
}

/**
 * The first term of `accepted` that is not what this gateway offers, as "<field> <sent> is not
 * <offered>": the price and the recipient (the network and the asset are the verifier's;
 * maxTimeoutSeconds is bounded by its validity check, and `extra` only describes the asset).
 */
function requirementsMismatch(accepted: AcceptedRequirements, offered: ReturnType<typeof paymentRequirementsV2>): string | undefined {
  if (accepted.amount !== offered.amount)
    return `accepted.amount ${JSON.stringify(accepted.amount)} is not ${JSON.stringify(offered.amount)}`
  if (accepted.payTo.toLowerCase() !== offered.payTo.toLowerCase()) return `accepted.payTo ${accepted.payTo} is not ${offered.payTo}`
  return undefined
}

/** Checks that a payment was made for the request it comes with; throws a PaymentRefused naming the mismatch. */
export function createPaymentBinding({ requirements, publicUrl, otherResources }: PaymentBindingOptions) {
  const offered = paymentRequirementsV2({ ...requirements, resource: '', description: '' })
  return function checkBinding(payment: Payment, request: PaidRequest): void {
    if (payment.accepted) {
      const terms = request.price === undefined ? offered : { ...offered, amount: request.price.toString() }
      const mismatch = requirementsMismatch(payment.accepted, terms)
      if (mismatch)
        throw new PaymentRefused(
          'wrong_requirements',
          `wrong requirements: the payment accepted other terms than this route's (${mismatch}); pay with the requirements of this request's 402`,
        )
    }
    const url = payment.resource
    if (url === undefined) return
    const same = publicUrl ? url === request.resource : pathOf(url) === request.path
    if (same || otherResources(request.method, request.path).includes(url)) return
    throw new PaymentRefused(
      'wrong_resource',
      `wrong resource: the payment was made for ${url}, not for ${request.method} ${request.resource}; pay with the 402 of the resource you request`,
    )
  }
}
