import { Address, Bytes32, integerStringPattern, Signature65 } from '@ats/contracts'
import { PaymentPayloadV1Schema, PaymentPayloadV2Schema, type z } from '@x402/core/schemas'
import { PAYMENT_IDENTIFIER, validatePaymentIdentifier } from '@x402/extensions/payment-identifier'
import { Type, type Static, type TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import type { Hex } from 'viem'
import { MalformedPaymentError, PaymentRefused } from '../errors.ts'

/**
 * The two payment headers, read with x402's own schemas (@x402/core) for the envelope and ours
 * for the `exact` EVM payload inside it; each malformation gets a message naming the field.
 */

/** EIP-3009 TransferWithAuthorization fields; addresses and nonce lower-case. */
export interface Authorization {
  from: Hex
  to: Hex
  value: bigint
  validAfter: bigint
  validBefore: bigint
  nonce: Hex
}

/** The authorization with its numbers as decimal strings, as JSON carries them. */
export const authorizationJson = (a: Authorization) => ({
  ...a,
  value: a.value.toString(),
  validAfter: a.validAfter.toString(),
  validBefore: a.validBefore.toString(),
})

/** An `exact` EVM payment from either header, normalised. */
export interface Payment {
  x402Version: 1 | 2
  scheme: 'exact'
  network: string
  /** v2 only: the asset of the requirements the client says it accepted (lower-case) */
  asset?: Hex
  /** 65 bytes r ‖ s ‖ v, lower-case */
  signature: Hex
  authorization: Authorization
  /** v2 only: the client's idempotency key, from the `payment-identifier` extension */
  paymentId?: string
  /** v2 only: the URL of the resource the client says it paid for (`resource.url`), when it says */
  resource?: string
  /** v2 only: the requirements the client says it accepted, as it sent them */
  accepted?: AcceptedRequirements
}

/** The `accepted` requirements of a v2 payment (x402's PaymentRequirements). */
export type AcceptedRequirements = z.infer<typeof PaymentPayloadV2Schema>['accepted']

export const V1_HEADER = 'X-PAYMENT'
export const V2_HEADER = 'PAYMENT-SIGNATURE'

// x402's exact/EVM spec: uint256 fields are decimal strings, or hex when 0x-prefixed
const uint256Description = 'a uint256 as a decimal or 0x-hex string'
const uint256 = Type.Union(
  [
    Type.String({ pattern: `${integerStringPattern}|^0x[0-9a-fA-F]{1,64}$` }),
    Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  ],
  { description: uint256Description },
)
const ExactEvmPayload = Type.Object({
  signature: Signature65(),
  authorization: Type.Object({
    from: Address(),
    to: Address(),
    value: uint256,
    validAfter: uint256,
    validBefore: uint256,
    nonce: Bytes32(),
  }),
})
const exactPayload = Compile(ExactEvmPayload)
const acceptedAsset = Compile(Type.Object({ asset: Address() }))
const maxUint256 = (1n << 256n) - 1n

const base64 = /^[A-Za-z0-9+/_-]+={0,2}$/

type Json = Record<string, unknown>

function parseJson(header: string, raw: string): Json {
  const value = raw.trim()
  if (value === '') throw new MalformedPaymentError(header, 'header is empty')
  if (!base64.test(value)) throw new MalformedPaymentError(header, 'not base64')
  let json: unknown
  try {
    json = JSON.parse(Buffer.from(value, 'base64').toString('utf8'))
  } catch {
    throw new MalformedPaymentError(header, 'base64 does not decode to JSON')
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new MalformedPaymentError(header, 'JSON is not an object')
  const version = (json as Json).x402Version
  const expected = header === V1_HEADER ? 1 : 2
  if (version === undefined) throw new MalformedPaymentError(header, 'x402Version is missing')
  if (version !== expected) throw new MalformedPaymentError(header, `x402Version must be ${expected}, not ${JSON.stringify(version)}`)
  return json as Json
}

/** The envelope, by x402's schema: the first problem as "<field> is missing" or "<field>: <what>". */
function envelope<T>(header: string, schema: z.ZodType<T>, json: Json): T {
  const result = schema.safeParse(json)
  if (result.success) return result.data
  const [issue] = result.error.issues
  const field = issue?.path.join('.') || 'payload'
  const missing = issue?.code === 'invalid_type' && issue.received === 'undefined'
  throw new MalformedPaymentError(header, missing ? `${field} is missing` : `${field}: ${issue?.message ?? 'invalid'}`)
}

/** The first problem a TypeBox schema finds, as "<prefix><field> is missing" or "... must be <its description>". */
function problem(validator: ReturnType<typeof Compile>, value: unknown, prefix: string): string | undefined {
  if (validator.Check(value)) return undefined
  const errors = [...validator.Errors(value)]
  const first = errors.find((e) => e.keyword === 'required') ?? errors[errors.length - 1]!
  const segments = first.instancePath.split('/').filter(Boolean)
  if (first.keyword === 'required') {
    const [name] = (first.params as { requiredProperties: string[] }).requiredProperties
    return `${prefix}${[...segments, name].join('.')} is missing`
  }
  let schema: TSchema | undefined = validator.Type() as TSchema
  for (const s of segments) schema = (schema as { properties?: Record<string, TSchema> }).properties?.[s]
  const what = (schema as { description?: string } | undefined)?.description ?? 'valid'
  return `${prefix}${segments.join('.')} must be ${what}`
}

function exact(header: string, scheme: string, payload: unknown): Pick<Payment, 'signature' | 'authorization'> {
  if (scheme !== 'exact') throw new PaymentRefused('unsupported_scheme', `${header}: scheme '${scheme}' is not supported; only 'exact'`)
  const wrong = problem(exactPayload, payload, 'payload.')
  if (wrong) throw new MalformedPaymentError(header, wrong)
  const { signature, authorization: a } = payload as Static<typeof ExactEvmPayload>
  const authorization = {
    from: a.from.toLowerCase() as Hex,
    to: a.to.toLowerCase() as Hex,
    value: BigInt(a.value),
    validAfter: BigInt(a.validAfter),
    validBefore: BigInt(a.validBefore),
    nonce: a.nonce.toLowerCase() as Hex,
  }
  for (const field of ['value', 'validAfter', 'validBefore'] as const) {
    if (authorization[field] > maxUint256)
      throw new MalformedPaymentError(header, `payload.authorization.${field} must be ${uint256Description}`)
  }
  return { signature: signature.toLowerCase() as Hex, authorization }
}

/** `X-PAYMENT` (x402 v1): base64 of {x402Version: 1, scheme, network, payload: {signature, authorization}}. */
export function decodeXPayment(raw: string): Payment {
  const p = envelope(V1_HEADER, PaymentPayloadV1Schema, parseJson(V1_HEADER, raw))
  return { x402Version: 1, scheme: 'exact', network: p.network, ...exact(V1_HEADER, p.scheme, p.payload) }
}

/**
 * The id of x402's `payment-identifier` extension, checked by x402's own validator. Only the
 * echoed `info` is checked: with the `schema` a client echoes, the validator would compile a
 * client-sent JSON schema on every request; ours is fixed and says the same as the id check.
 */
function paymentIdOf(extensions: Record<string, unknown> | undefined): string | undefined {
  const extension = extensions?.[PAYMENT_IDENTIFIER]
  if (extension === undefined) return undefined
  const info = typeof extension === 'object' && extension !== null ? { info: (extension as { info?: unknown }).info } : extension
  const { valid, errors } = validatePaymentIdentifier(info)
  if (!valid) throw new MalformedPaymentError(V2_HEADER, `extensions.${PAYMENT_IDENTIFIER}: ${errors?.join('; ') ?? 'invalid'}`)
  return (info as { info: { id?: string } }).info.id
}

/** `PAYMENT-SIGNATURE` (x402 v2): base64 of {x402Version: 2, resource?, accepted: PaymentRequirements, payload, extensions?}. */
export function decodePaymentSignature(raw: string): Payment {
  const p = envelope(V2_HEADER, PaymentPayloadV2Schema, parseJson(V2_HEADER, raw))
  const payment = exact(V2_HEADER, p.accepted.scheme, p.payload)
  const wrongAsset = problem(acceptedAsset, p.accepted, 'accepted.')
  if (wrongAsset) throw new MalformedPaymentError(V2_HEADER, wrongAsset)
  const paymentId = paymentIdOf(p.extensions ?? undefined)
  return {
    x402Version: 2,
    scheme: 'exact',
    network: p.accepted.network,
    asset: p.accepted.asset.toLowerCase() as Hex,
    ...payment,
    ...(paymentId === undefined ? {} : { paymentId }),
    ...(p.resource ? { resource: p.resource.url } : {}),
    accepted: p.accepted,
  }
}

type Headers = Record<string, string | string[] | undefined>

/** The payment a request carries (v2 header first), or undefined when it carries none. */
export function paymentFromHeaders(headers: Headers): Payment | undefined {
  const one = (name: string) => {
    const v = headers[name.toLowerCase()]
    return Array.isArray(v) ? v[0] : v
  }
  const v2 = one(V2_HEADER)
  if (v2 !== undefined) return decodePaymentSignature(v2)
  const v1 = one(V1_HEADER)
  if (v1 !== undefined) return decodeXPayment(v1)
  return undefined
}
