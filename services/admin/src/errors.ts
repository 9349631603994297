// The admin service's error registry: every error it answers with, one code each (ATS_ERR_ADMIN_*).
import { createError } from '@ats/service-kit'

/** A readonly key cannot reach a swap route, so a policy on it would limit nothing. */
export const PolicyOnReadonlyKey = createError(
  'ATS_ERR_ADMIN_POLICY_ON_READONLY_KEY',
  'a readonly key cannot swap; spend policies apply to readwrite and admin keys',
  400,
)
/** One more webhook subscription than WEBHOOK_MAX_PER_KEY allows. */
export const TooManyWebhooks = createError<[number]>(
  'ATS_ERR_ADMIN_TOO_MANY_WEBHOOKS',
  'this key has %d webhook subscriptions already (WEBHOOK_MAX_PER_KEY): delete one first',
  409,
)
/** A test event is one synchronous try: redelivering it would put it on the retry schedule. */
export const TestEventNotRedelivered = createError<[string]>(
  'ATS_ERR_ADMIN_TEST_EVENT_NOT_REDELIVERED',
  'delivery %s is a webhook.test event, which is not redelivered: POST /webhooks/:id/test sends a new one',
  409,
)
/** A revoked key's subscriptions stay disabled: nothing is sent for a key that no longer exists for us. */
export const WebhookOfRevokedKey = createError<[string, string]>(
  'ATS_ERR_ADMIN_WEBHOOK_OF_REVOKED_KEY',
  'webhook %s belongs to key %s, which was revoked: it stays disabled and is not changed, tested or redelivered (it can be read or deleted)',
  409,
)
/** POST /credit/topup reached admin without the gateway's verified payment: only an x402 payment buys credit. */
export const TopupWithoutPayment = createError(
  'ATS_ERR_ADMIN_TOPUP_WITHOUT_PAYMENT',
  'credit is bought with an x402 payment of the amount: send the payment the 402 asks for',
  400,
)
/** GET /credit by a caller who names no wallet it may read. */
export const CreditWalletNotAllowed = createError<[string]>('ATS_ERR_ADMIN_CREDIT_WALLET_NOT_ALLOWED', '%s', 403)
/** A withdrawal the gateway did not take from the credit (no `withdraw` debit under this key). */
export const NoCreditWithdrawal = createError<[string]>(
  'ATS_ERR_ADMIN_NO_CREDIT_WITHDRAWAL',
  "no withdrawal under Idempotency-Key %s was taken from this wallet's credit",
  404,
)
/** A withdrawal over CREDIT_WITHDRAW_MAX or past CREDIT_WITHDRAW_DAILY_MAX: refused, the credit given back. */
export const CreditWithdrawalOverCap = createError<[string]>(
  'ATS_ERR_ADMIN_CREDIT_WITHDRAWAL_OVER_CAP',
  'withdrawal refused, the credit is given back: %s',
  403,
)
/** The server wallet is paused (or its switch cannot be read): refused, the credit given back. */
export const CreditWithdrawalPaused = createError<[string]>(
  'ATS_ERR_ADMIN_CREDIT_WITHDRAWAL_PAUSED',
  'withdrawal refused, the credit is given back: %s',
  423,
)
/** The transfer could not be made (nothing signed, reverted or dropped): the credit given back. */
export const CreditWithdrawalNotSent = createError<[string]>(
  'ATS_ERR_ADMIN_CREDIT_WITHDRAWAL_NOT_SENT',
  'withdrawal not paid, the credit is given back: %s',
  502,
)
/** POST /credit/withdraw without the key it is taken under (the gateway sends one, made if the client sent none). */
export const WithdrawalWithoutKey = createError(
  'ATS_ERR_ADMIN_WITHDRAWAL_WITHOUT_KEY',
  'a withdrawal runs under an Idempotency-Key: the gateway forwards the one it took the credit under',
  400,
)
