// The trading service's error registry: every error it answers with, one code each (ATS_ERR_TRADING_*).
import { createError } from '@ats/service-kit'

/** No pool path quotes the pair, or the amount is below what the path can carry. */
export const NoRoute = createError<[string]>('ATS_ERR_TRADING_NO_ROUTE', '%s', 422)
/** The amount is more than the best path takes whole. */
export const TooLarge = createError<[string]>('ATS_ERR_TRADING_TOO_LARGE', '%s', 422)
/** The swap would move the price by more than the wallet's policy allows. */
export const PriceImpactTooHigh = createError<[string]>('ATS_ERR_TRADING_PRICE_IMPACT_TOO_HIGH', '%s', 422)
/** The approval was approved, rejected or withdrawn already. */
export const ApprovalDecided = createError<[string]>('ATS_ERR_TRADING_APPROVAL_DECIDED', '%s', 409)
/** The key that asked for a held swap tried to approve it, and its policy does not set selfApprove. */
export const SelfApproval = createError<[string]>(
  'ATS_ERR_TRADING_SELF_APPROVAL',
  'key %s asked for this swap and cannot approve it itself: an admin key or a key its spend policy names in approvers decides it (a policy with selfApprove: true lets a key approve its own swaps)',
  403,
)
/** A token launch whose deployment reverted. */
export const LaunchFailed = createError<[string]>('ATS_ERR_TRADING_LAUNCH_FAILED', '%s', 422)

// on the way to the chain (chainTx.ts)
export const ReceiptTimeout = createError<[string, number]>(
  'ATS_ERR_TRADING_RECEIPT_TIMEOUT',
  'transaction %s was sent but not mined within %d ms; repeat the request with the same Idempotency-Key to pick it up',
  504,
)
export const WouldRevert = createError<[string]>('ATS_ERR_TRADING_WOULD_REVERT', '%s', 422)
export const ChainUnavailable = createError<[string]>('ATS_ERR_TRADING_CHAIN_UNAVAILABLE', 'the chain did not answer: %s', 502)

// swaps from a user's own wallet under its grant (grants/grants.ts)
/** No grant lets the swap happen: none, revoked, expired, or the token, DEX or allowance not granted. */
export const GrantRefused = createError<[string]>('ATS_ERR_TRADING_GRANT_REFUSED', '%s', 403)
/** The grant's amount for the current period is used up; the message says when it renews. */
export const GrantExhausted = createError<[string]>('ATS_ERR_TRADING_GRANT_EXHAUSTED', '%s', 409)
/** Swaps from users' own wallets are not set up here (no delegate key, or no TradeGrants contract). */
export const GrantsUnavailable = createError<[string]>('ATS_ERR_TRADING_GRANTS_UNAVAILABLE', '%s', 503)
