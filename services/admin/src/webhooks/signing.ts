// Standard Webhooks signing: the headers a delivery carries, and the secrets they are signed with.
import { randomBytes } from 'node:crypto'
import { Webhook } from 'standardwebhooks'

export interface Signed {
  'webhook-id': string
  'webhook-timestamp': string
  /** one `v1,<base64>` per secret, space-separated (the current secret, then the one in its grace period) */
  'webhook-signature': string
}

/** Standard Webhooks headers for `body`, signed with every secret given (whsec_…). */
export function signWebhook(id: string, at: Date, body: string, secrets: string[]): Signed {
  if (secrets.length === 0) throw new Error('signWebhook needs at least one secret')
  return {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': secrets.map((secret) => new Webhook(secret).sign(id, at, body)).join(' '),
  }
}

/** A new secret, `whsec_` + base64 of 24 random bytes (the Standard Webhooks format). */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`
}
