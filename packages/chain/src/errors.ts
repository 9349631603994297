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
