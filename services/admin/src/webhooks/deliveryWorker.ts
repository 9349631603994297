// Sends due webhook deliveries, several at once, from every admin replica: each claims its rows
// (FOR UPDATE SKIP LOCKED, held until locked_until), so none is sent twice at the same time, and
// one whose sender died is taken up again once its lock runs out. A delivery whose key is revoked
// is cancelled instead of sent, whatever its subscription says.
import type { DeliveryAttempt } from '@ats/contracts'
import { startWorkerLoop, type Logger, type WorkerLoop } from '@ats/service-kit'
import type { PrismaClient, WebhookDelivery, WebhookSubscription } from '../generated/prisma/client.ts'
import type { AdminConfig } from '../service.ts'
import { retireWebhooksOfKey } from './keyRevocation.ts'
import { nextDelayMs } from './retrySchedule.ts'
import { sendWebhook, type Attempt } from './sender.ts'
import { signWebhook } from './signing.ts'
import type { UrlRules } from './urlRules.ts'

export interface DeliveryWorkerOptions {
  db: PrismaClient
  log: Logger
  rules: UrlRules
  /** WEBHOOK_RETRY_SCHEDULE: the delays between tries (the first after the first failure); past its end a delivery has failed */
  retrySchedule: number[]
  settings: AdminConfig
}

/** A claimed delivery with what sending it needs: its subscription's, and when its key was revoked (null: it is active). */
type Claimed = Pick<WebhookDelivery, 'id' | 'subscriptionId' | 'eventId' | 'eventType' | 'body' | 'attempts'> &
  Pick<WebhookSubscription, 'url' | 'secret' | 'previousSecret' | 'previousSecretUntil' | 'keyId'> & {
    attemptLog: DeliveryAttempt[]
    keyRevokedAt: Date | null
  }

const attemptLogSize = 20
/** how much of an answer a try keeps (the log's `response`) */
export const maxResponseBytes = 4096
/** beyond the send's own timeout, for the claim to outlast writing the result */
const lockMarginMs = 5_000

/** What the log keeps of a try. */
export const logEntryOf = (at: Date, a: Attempt): DeliveryAttempt => ({
  at: at.getTime(),
  ...(a.status === undefined ? {} : { status: a.status }),
  ...(a.error === undefined ? {} : { error: a.error }),
  durationMs: Math.round(a.durationMs),
  ...(a.response === undefined ? {} : { response: a.response }),
})

/** The secrets that sign at `at`: the current one, and the one before a rotation during its grace period. */
export const signingSecrets = (
  s: { secret: string; previousSecret: string | null; previousSecretUntil: Date | null },
  at: Date,
): string[] => [s.secret, ...(s.previousSecret && s.previousSecretUntil && s.previousSecretUntil > at ? [s.previousSecret] : [])]

const failureOf = (a: Attempt) => (a.status === undefined ? (a.error ?? 'no answer') : `HTTP ${a.status}${a.error ? ` (${a.error})` : ''}`)

export function startDeliveryWorker(options: DeliveryWorkerOptions): WorkerLoop {
  const { db, log, rules, retrySchedule, settings } = options
  const { WEBHOOK_TIMEOUT_MS: timeoutMs, WEBHOOK_CONCURRENCY: concurrency } = settings
  const inFlight = new Set<Promise<void>>()

  // due deliveries of enabled subscriptions, and of revoked keys whatever their subscription says
  // (one queued by a fan-out that raced the revocation): those are taken to be cancelled
  const claim = (limit: number) =>
    db.$queryRaw<Claimed[]>`
      UPDATE webhook_deliveries d SET locked_until = now() + ${timeoutMs + lockMarginMs} * interval '1 millisecond'
      FROM webhook_subscriptions s JOIN api_keys k ON k.id = s.key_id
      WHERE s.id = d.subscription_id AND d.id IN (
        SELECT dd.id FROM webhook_deliveries dd
          JOIN webhook_subscriptions ss ON ss.id = dd.subscription_id JOIN api_keys kk ON kk.id = ss.key_id
        WHERE dd.status = 'pending' AND dd.next_attempt_at <= now() AND (dd.locked_until IS NULL OR dd.locked_until <= now())
          AND (ss.enabled OR kk.revoked_at IS NOT NULL)
        ORDER BY dd.next_attempt_at LIMIT ${limit}
        FOR UPDATE OF dd SKIP LOCKED)
      RETURNING d.id, d.subscription_id AS "subscriptionId", d.event_id AS "eventId", d.event_type AS "eventType", d.body,
        d.attempts, d.attempt_log AS "attemptLog", s.url, s.secret, s.previous_secret AS "previousSecret",
        s.previous_secret_until AS "previousSecretUntil", s.key_id AS "keyId", k.revoked_at AS "keyRevokedAt"`

  async function succeeded(d: Claimed, attemptLog: DeliveryAttempt[]) {
    // updateMany: a subscription deleted meanwhile took its deliveries with it, and there is nothing to record
    await db.$transaction([
      db.webhookDelivery.updateMany({
        where: { id: d.id },
        data: {
          status: 'succeeded',
          attempts: d.attempts + 1,
          attemptLog,
          deliveredAt: new Date(),
          nextAttemptAt: null,
          lockedUntil: null,
          // a try under way when its key was revoked that got through: the log says it was delivered
          cancelledAt: null,
          cancelReason: null,
        },
      }),
      db.webhookSubscription.updateMany({ where: { id: d.subscriptionId, failingSince: { not: null } }, data: { failingSince: null } }),
    ])
  }

  async function failed(d: Claimed, attemptLog: DeliveryAttempt[], attempt: Attempt) {
    const attempts = d.attempts + 1
    const delay = nextDelayMs(retrySchedule, attempts)
    const now = new Date()
    const recorded = await db.webhookDelivery.updateMany({
      where: { id: d.id, status: 'pending' },
      data: {
        status: delay === undefined ? 'failed' : 'pending',
        attempts,
        attemptLog,
        nextAttemptAt: delay === undefined ? null : new Date(now.getTime() + delay),
        lockedUntil: null,
      },
    })
    if (recorded.count === 0) {
      // cancelled while this try was under way (its key was revoked): the try is logged, none follows
      await db.webhookDelivery.updateMany({ where: { id: d.id, status: 'cancelled' }, data: { attempts, attemptLog, lockedUntil: null } })
      return
    }
    // the first failure after a success starts the streak
    await db.webhookSubscription.updateMany({ where: { id: d.subscriptionId, failingSince: null }, data: { failingSince: now } })
    if (delay !== undefined) return
    const since = new Date(now.getTime() - settings.WEBHOOK_DISABLE_AFTER_MS)
    const reason = (failingSince: Date) =>
      `disabled ${now.toISOString()}: every delivery since ${failingSince.toISOString()} failed; last: ${failureOf(attempt)}`
    const sub = await db.webhookSubscription.findUnique({ where: { id: d.subscriptionId }, select: { failingSince: true, enabled: true } })
    if (!sub?.enabled || !sub.failingSince || sub.failingSince > since) return
    const { count } = await db.webhookSubscription.updateMany({
      where: { id: d.subscriptionId, enabled: true, failingSince: sub.failingSince },
      data: { enabled: false, disabledReason: reason(sub.failingSince), updatedAt: now },
    })
    if (count > 0)
      log.warn(
        { subscriptionId: d.subscriptionId, failingSince: sub.failingSince },
        'webhook subscription disabled: its deliveries have failed for too long',
      )
  }

  async function cancel(d: Claimed, revokedAt: Date) {
    const retired = await db.$transaction((tx) => retireWebhooksOfKey(tx, d.keyId, revokedAt))
    log.warn(
      { keyId: d.keyId, subscriptionId: d.subscriptionId, deliveryId: d.id, deliveriesCancelled: retired.cancelled },
      'webhook delivery of a revoked key cancelled, not sent',
    )
  }

  async function deliver(d: Claimed) {
    if (d.keyRevokedAt) return cancel(d, d.keyRevokedAt)
    const at = new Date()
    const headers = { ...signWebhook(d.eventId, at, d.body, signingSecrets(d, at)) }
    const attempt = await sendWebhook({ url: d.url, headers, body: d.body, timeoutMs, maxResponseBytes, rules })
    const attemptLog = [...d.attemptLog, logEntryOf(at, attempt)].slice(-attemptLogSize)
    const fields = {
      subscriptionId: d.subscriptionId,
      deliveryId: d.id,
      eventId: d.eventId,
      eventType: d.eventType,
      attempt: d.attempts + 1,
      status: attempt.status,
      ms: Math.round(attempt.durationMs),
    }
    if (attempt.ok) {
      await succeeded(d, attemptLog)
      log.info(fields, 'webhook delivered')
    } else {
      await failed(d, attemptLog, attempt)
      log.warn({ ...fields, error: attempt.error }, 'webhook delivery failed')
    }
  }

  const loop = startWorkerLoop({
    name: 'webhook-sender',
    log,
    idleMs: settings.WEBHOOK_POLL_MS,
    round: async () => {
      const free = concurrency - inFlight.size
      if (free <= 0) return false
      const due = await claim(free)
      for (const d of due) {
        const task: Promise<void> = deliver(d)
          .catch((error) =>
            log.error({ err: error, deliveryId: d.id }, 'webhook delivery could not be recorded; it is tried again once its lock ends'),
          )
          .finally(() => {
            inFlight.delete(task)
            loop.wake()
          })
        inFlight.add(task)
      }
      return due.length === free
    },
  })
  return {
    wake: loop.wake,
    async stop() {
      await loop.stop()
      await Promise.allSettled([...inFlight])
    },
  }
}
