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
