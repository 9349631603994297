// The gateway's error registry: every error it answers with or refuses a payment with, one code each.
import { createError } from '@ats/service-kit'

// ---- keys and limits (auth/) ----

/** Too many failed authentications from one address (its /v1 code, auth_failures, is one clients have seen). */
export const AuthFailures = createError<[number]>(
  'ATS_ERR_AUTH_FAILURES',
  'too many failed authentications from this address; retry in %s s',
  429,
)
export const TooManyInFlight = createError<[string, number]>(
  'ATS_ERR_TOO_MANY_IN_FLIGHT',
  'too many requests in flight for this %s (at most %s at once); retry when one has finished',
  429,
)
/** A key over its tier's limit (OpenAI's rate_limit_exceeded on /v1). */
export const RateLimited = createError<[number, number, number]>(
  'ATS_ERR_RATE_LIMITED',
  'rate limit exceeded: %s requests per %s s for this key; retry in %s s',
  429,
)
/** A payer whose payments were refused too often this window (PAYER_FAILURE_LIMIT). */
export const PayerFailures = createError<[string, number]>(
  'ATS_ERR_PAYER_FAILURES',
  'too many refused payments from payer %s; retry in %s s',
  429,
)
/** A client address or payer over its limit of paid requests. */
export const PaidRateLimited = createError<[number, number, string, number]>(
  'ATS_ERR_PAID_RATE_LIMITED',
  'rate limit exceeded: %s paid requests per %s s for this %s; retry in %s s',
  429,
)

// ---- payments (payments/, mcp/) ----

export const PaymentIdReused = createError<[string]>(
  'ATS_ERR_PAYMENT_ID_REUSED',
  'payment id %s was first used with another request (method, path, query or body differ); use a new id for a new request',
  409,
)
/** The same request under a used payment id with a new authorization: only the first payment repeats it. */
export const PaymentIdOtherPayment = createError<[string, string]>(
  'ATS_ERR_PAYMENT_ID_OTHER_PAYMENT',
  'payment id %s was first used with another payment (nonce %s): to get its answer again send that same payment again; a new payment needs a new id',
  409,
)
export const PaymentIdInProgress = createError<[string]>(
  'ATS_ERR_PAYMENT_ID_IN_PROGRESS',
  'payment id %s: the request is still being answered; send it again in a few seconds',
  409,
)
export const PaymentIdNotStored = createError<[string, string]>(
  'ATS_ERR_PAYMENT_ID_NOT_STORED',
  'payment id %s: its answer was given once and not kept (%s), so it is not given again; a new payment with a new id asks again',
  409,
)

/**
 * Which check refused a payment: our names, in x402's snake_case style. They never reach the
 * client: the 402 answer carries x402's `error` field with the message (see docs/architecture.md,
 * "Errors"); tests and logs read the reason.
 */
export type PaymentRefusalReason =
  | 'malformed_header'
  | 'unsupported_scheme'
  | 'wrong_network'
  | 'wrong_asset'
  | 'wrong_recipient'
  | 'wrong_resource'
  | 'wrong_requirements'
  | 'amount_too_low'
  | 'not_yet_valid'
  | 'expired'
  | 'validity_too_long'
  | 'invalid_signature'
  | 'signer_mismatch'
  | 'nonce_used'
  | 'insufficient_funds'
  | 'payer_blocked'

/**
 * A payment refused: answered 402 with the message, which says exactly what is wrong and is safe
 * to show the client. `payer`: the signer it counts against (its signature verified, and the
 * refusal is theirs to answer for); without one it counts against the client address.
 */
export class PaymentRefused extends Error {
  override name = 'PaymentRefused'
  readonly code = 'ATS_ERR_PAYMENT_REFUSED'
  readonly statusCode = 402
  constructor(
    readonly reason: PaymentRefusalReason,
    message: string,
    readonly payer?: string,
  ) {
    super(message)
  }
}

/** A payment header that cannot be read at all (bad base64, not JSON, missing or ill-typed fields). */
export class MalformedPaymentError extends PaymentRefused {
  override name = 'MalformedPaymentError'
  constructor(
    readonly header: string,
    detail: string,
  ) {
    super('malformed_header', `${header}: ${detail}`)
  }
}

/**
 * A dependency of verification (Redis, the chain) failed: the payment may be fine, so this
 * is not a refusal (answer 503, not 402).
 */
export class PaymentUnavailableError extends Error {
  override name = 'PaymentUnavailableError'
}

/** A payment in `_meta` that cannot be sent on: the client's mistake, answered as a tool error. */
export class McpPaymentError extends Error {
  override name = 'McpPaymentError'
}

// ---- MCP (mcp/) ----

export const MethodNotAllowed = createError<[string]>(
  'ATS_ERR_METHOD_NOT_ALLOWED',
  '%s /mcp is not served: this MCP server is stateless (no sessions, no server-sent stream); POST each message',
  405,
)

// ---- prepaid credit (credit/) ----

/** The credit copy (Redis), the ledger's snapshot or the debit stream cannot be reached: the request may be fine, try again. */
export const CreditUnavailable = createError<[string]>('ATS_ERR_CREDIT_UNAVAILABLE', '%s; try again shortly', 503)
/** The wallet's credit does not cover a request or withdrawal (paid routes answer it as x402's 402, with a top-up option). */
export const InsufficientCredit = createError<[string, string, string, string]>(
  'ATS_ERR_INSUFFICIENT_CREDIT',
  'insufficient credit: %s has %s available, this %s %s (USDC base units); top up at /credit/topup',
  402,
)
/** A SIGN-IN-WITH-X header that is malformed, not ours, expired, replayed or not signed by its address. */
export const SignInRefused = createError<[string]>('ATS_ERR_SIGN_IN_REFUSED', 'sign-in refused: %s', 401)
/** A session token (Authorization: Bearer atcs_…) that is unknown or expired. */
export const SessionInvalid = createError<[string]>('ATS_ERR_SESSION_INVALID', '%s', 401)
/** A top-up amount outside CREDIT_MIN_TOPUP..CREDIT_MAX_TOPUP, or not a whole number of base units. */
export const TopUpAmountInvalid = createError<[string]>('ATS_ERR_TOP_UP_AMOUNT_INVALID', '%s', 400)
