/** Why a payment was refused; the message says exactly what is wrong and is safe to show the client. */
export type PaymentErrorCode =
  | 'malformed_header'
  | 'unsupported_scheme'
  | 'wrong_network'
  | 'wrong_asset'
  | 'wrong_recipient'
  | 'amount_too_low'
  | 'not_yet_valid'
  | 'expired'
  | 'validity_too_long'
  | 'invalid_signature'
  | 'signer_mismatch'
  | 'nonce_used'
  | 'insufficient_funds'
  | 'payer_blocked'

export class PaymentError extends Error {
  override name = 'PaymentError'
  constructor(
    readonly code: PaymentErrorCode,
    message: string,
  ) {
    super(message)
  }
}

/** A payment header that cannot be read at all (bad base64, not JSON, missing or ill-typed fields). */
export class MalformedPaymentError extends PaymentError {
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
 * is not a PaymentError (answer 503, not 402).
 */
export class PaymentUnavailableError extends Error {
  override name = 'PaymentUnavailableError'
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
  }
}
