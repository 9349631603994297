// The market-data service's error registry: every error it answers with, one code each (ATS_ERR_MARKET_*).
import { createError } from '@ats/service-kit'

/** A chain or token no bridge of the source knows: the client's request cannot be quoted as asked. */
export const BridgeUnsupported = createError<[string]>('ATS_ERR_MARKET_BRIDGE_UNSUPPORTED', '%s', 400)
/** The source knows the chains and tokens but no bridge carries this transfer (amount too small, no liquidity). */
export const NoBridgeRoute = createError<[string]>('ATS_ERR_MARKET_NO_BRIDGE_ROUTE', '%s', 422)
/** An upstream answered something that is not the documented shape. */
export const UnexpectedAnswer = createError<[string, string]>(
  'ATS_ERR_MARKET_UNEXPECTED_ANSWER',
  '%s answered an unexpected shape: %s',
  502,
)
