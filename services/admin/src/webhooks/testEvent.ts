// The test event a subscriber asks for (POST /webhooks/:id/test): one webhook.test, signed and sent
// now as a real delivery is, through the same sender (same timeout, same address rules), tried once
// and kept in the delivery log as a delivery that already ended.
import { randomBytes } from 'node:crypto'
import { webhookTestEventType, type WebhookTestResult } from '@ats/contracts'
import { newEventId } from '@ats/service-kit'
import type { PrismaClient, WebhookSubscription } from '../generated/prisma/client.ts'
import { logEntryOf, maxResponseBytes, signingSecrets } from './deliveryWorker.ts'
import { deliveryBody } from './fanout.ts'
import { sendWebhook } from './sender.ts'
import { signWebhook } from './signing.ts'
import type { UrlRules } from './urlRules.ts'

export interface TestEventOptions {
  rules: UrlRules
  /** WEBHOOK_TIMEOUT_MS, as for real deliveries */
  timeoutMs: number
}

const message = 'a test event, sent on request (POST /webhooks/:id/test)'

/**
 * Sends one webhook.test to the subscription's URL whether or not it is enabled (testing the
 * endpoint is the point, paused or not) and records it. It is stored already ended (succeeded or
 * failed, no next try), so the sender never takes it up, and it touches no failure streak: a test
 * neither disables a subscription nor vouches for it.
 */
export async function sendTestEvent(
  db: PrismaClient,
  sub: WebhookSubscription,
  { rules, timeoutMs }: TestEventOptions,
): Promise<WebhookTestResult> {
  const at = new Date()
  const eventId = newEventId()
  const deliveryId = `whd_${randomBytes(16).toString('hex')}`
  const body = deliveryBody({ id: eventId, type: webhookTestEventType, at: at.getTime(), data: { subscriptionId: sub.id, message } })
  const headers = { ...signWebhook(eventId, at, body, signingSecrets(sub, at)) }
  const attempt = await sendWebhook({ url: sub.url, headers, body, timeoutMs, maxResponseBytes, rules })
  const entry = logEntryOf(at, attempt)
  // from the subscription row, not a plain insert: one deleted meanwhile has no log to write to
  await db.$executeRaw`
    INSERT INTO webhook_deliveries (id, subscription_id, event_id, event_type, body, status, attempts, next_attempt_at, attempt_log, created_at, delivered_at)
    SELECT ${deliveryId}::text, s.id, ${eventId}::text, ${webhookTestEventType}::text, ${body}::text, ${attempt.ok ? 'succeeded' : 'failed'}::text,
      1, NULL, ${JSON.stringify([entry])}::jsonb, ${at}::timestamptz, ${attempt.ok ? new Date() : null}::timestamptz
    FROM webhook_subscriptions s WHERE s.id = ${sub.id}::text`
  return {
    delivered: attempt.ok,
    ...(entry.status === undefined ? {} : { status: entry.status }),
    ...(entry.error === undefined ? {} : { error: entry.error }),
    durationMs: entry.durationMs,
    ...(entry.response === undefined ? {} : { response: entry.response }),
    eventId,
    deliveryId,
  }
}
