import type { Hex } from 'viem'
import { MalformedPaymentError, PaymentError } from './errors.ts'

/** EIP-3009 TransferWithAuthorization fields; addresses and nonce lower-case. */
export interface Authorization {
  from: Hex
  to: Hex
  value: bigint
  validAfter: bigint
  validBefore: bigint
  nonce: Hex
}

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
}

export const V1_HEADER = 'X-PAYMENT'
export const V2_HEADER = 'PAYMENT-SIGNATURE'

const base64 = /^[A-Za-z0-9+/_-]+={0,2}$/
const address = /^0x[0-9a-fA-F]{40}$/
const bytes32 = /^0x[0-9a-fA-F]{64}$/
const signature65 = /^0x[0-9a-fA-F]{130}$/
const decimal = /^[0-9]+$/
const hexNumber = /^0x[0-9a-fA-F]+$/i
const maxUint256 = (1n << 256n) - 1n

type Json = Record<string, unknown>
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

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
  if (!isObject(json)) throw new MalformedPaymentError(header, 'JSON is not an object')
  return json
}

function field(header: string, obj: Json, path: string, name: string): unknown {
  const value = obj[name]
  if (value === undefined || value === null) throw new MalformedPaymentError(header, `${path}${name} is missing`)
  return value
}

function stringField(header: string, obj: Json, path: string, name: string, pattern: RegExp, what: string): string {
  const value = field(header, obj, path, name)
  if (typeof value !== 'string' || !pattern.test(value)) throw new MalformedPaymentError(header, `${path}${name} must be ${what}`)
  return value
}

/** x402's exact/EVM spec: uint256 fields are decimal strings, or hex when 0x-prefixed. */
function uintField(header: string, obj: Json, path: string, name: string): bigint {
  const value = field(header, obj, path, name)
  let n: bigint | undefined
  if (typeof value === 'string' && (decimal.test(value) || hexNumber.test(value))) n = BigInt(value)
  else if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) n = BigInt(value)
  if (n === undefined || n > maxUint256)
    throw new MalformedPaymentError(header, `${path}${name} must be a uint256 as a decimal or 0x-hex string`)
  return n
}

function objectField(header: string, obj: Json, path: string, name: string): Json {
  const value = field(header, obj, path, name)
  if (!isObject(value)) throw new MalformedPaymentError(header, `${path}${name} must be an object`)
  return value
}

function exactPayload(header: string, payload: Json): Pick<Payment, 'signature' | 'authorization'> {
  const signature = stringField(header, payload, 'payload.', 'signature', signature65, '65 bytes of 0x-hex')
  const auth = objectField(header, payload, 'payload.', 'authorization')
  const at = 'payload.authorization.'
  return {
    signature: signature.toLowerCase() as Hex,
    authorization: {
      from: stringField(header, auth, at, 'from', address, 'a 0x-hex address').toLowerCase() as Hex,
      to: stringField(header, auth, at, 'to', address, 'a 0x-hex address').toLowerCase() as Hex,
      value: uintField(header, auth, at, 'value'),
      validAfter: uintField(header, auth, at, 'validAfter'),
      validBefore: uintField(header, auth, at, 'validBefore'),
      nonce: stringField(header, auth, at, 'nonce', bytes32, '32 bytes of 0x-hex').toLowerCase() as Hex,
    },
  }
}

function scheme(header: string, value: unknown, path: string): 'exact' {
  if (typeof value !== 'string') throw new MalformedPaymentError(header, `${path}scheme is missing`)
  if (value !== 'exact') throw new PaymentError('unsupported_scheme', `${header}: scheme '${value}' is not supported; only 'exact'`)
  return value
}

function network(header: string, value: unknown, path: string): string {
  if (typeof value !== 'string' || value === '') throw new MalformedPaymentError(header, `${path}network is missing`)
  return value
}

function version(header: string, json: Json, expected: 1 | 2): void {
  const v = json.x402Version
  if (v === undefined) throw new MalformedPaymentError(header, 'x402Version is missing')
  if (v !== expected) throw new MalformedPaymentError(header, `x402Version must be ${expected}, not ${JSON.stringify(v)}`)
}

/** `X-PAYMENT` (x402 v1): base64 of {x402Version: 1, scheme, network, payload: {signature, authorization}}. */
export function decodeXPayment(raw: string): Payment {
  const h = V1_HEADER
  const json = parseJson(h, raw)
  version(h, json, 1)
  const s = scheme(h, json.scheme, '')
  const n = network(h, json.network, '')
  return { x402Version: 1, scheme: s, network: n, ...exactPayload(h, objectField(h, json, '', 'payload')) }
}

/**
 * `PAYMENT-SIGNATURE` (x402 v2): base64 of {x402Version: 2, resource?, accepted: PaymentRequirements,
 * payload: {signature, authorization}, extensions?}. Scheme and network live in `accepted`; early v2
 * payloads also carried them at the top level, which we accept when `accepted` lacks them.
 */
export function decodePaymentSignature(raw: string): Payment {
  const h = V2_HEADER
  const json = parseJson(h, raw)
  version(h, json, 2)
  const accepted = objectField(h, json, '', 'accepted')
  const s = scheme(h, accepted.scheme ?? json.scheme, 'accepted.')
  const n = network(h, accepted.network ?? json.network, 'accepted.')
  const asset = stringField(h, accepted, 'accepted.', 'asset', address, 'a 0x-hex address').toLowerCase() as Hex
  return { x402Version: 2, scheme: s, network: n, asset, ...exactPayload(h, objectField(h, json, '', 'payload')) }
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
