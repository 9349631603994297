// The chain package's errors: the ones a service may answer with (it has no @fastify/error, so a class with code and status).

/** A typed 503: services answer it as `{error: "server wallet not configured"}`, not as a 500. */
export class ServerWalletNotConfigured extends Error {
  override name = 'ServerWalletNotConfigured'
  readonly code = 'ATS_ERR_SERVER_WALLET_NOT_CONFIGURED'
  readonly statusCode = 503
  constructor() {
    super('server wallet not configured')
  }
}

/** A 400: an amount that is not a positive integer in base units that fits a uint256 (parseAmount). */
export class InvalidAmount extends Error {
  override name = 'InvalidAmount'
  readonly code = 'ATS_ERR_INVALID_AMOUNT'
  readonly statusCode = 400
}

/** A 403: a swap from the server wallet that would pay out to a recipient its owner may not name (checkRecipient). */
export class RecipientNotAllowed extends Error {
  override name = 'RecipientNotAllowed'
  readonly code = 'ATS_ERR_RECIPIENT_NOT_ALLOWED'
  readonly statusCode = 403
}
