// Events from the events stream become deliveries: one per subscription that wants the event's
// type and belongs to its owner. Nothing crosses owners.
import type { AdminChannels, DomainEvent } from '@ats/contracts'
import { startDurableConsumer, type Logger, type WorkerLoop } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { PrismaClient } from '../generated/prisma/client.ts'

/** What is POSTed, byte for byte the same on every try: the Standard Webhooks payload shape (a test event's too). */
export const deliveryBody = (event: Pick<DomainEvent, 'id' | 'at' | 'data'> & { type: string }) =>
  JSON.stringify({ id: event.id, type: event.type, timestamp: new Date(event.at).toISOString(), data: event.data })

/**
 * Inserts the event's deliveries in one statement; returns how many are new. A subscription
 * receives it when enabled, asking for its type and owned by an active key that is an admin key
 * (every event), the key that caused it, or the key bound to the wallet it concerns. A repeat of
 * the event (a redelivery of the stream message) inserts nothing: unique (subscription, event).
 */
function enqueueEvent(db: PrismaClient, event: DomainEvent): Promise<number> {
  const keyId = event.owner.keyId ?? null
  const wallet = event.owner.wallet?.toLowerCase() ?? null
  return db.$executeRaw`
    INSERT INTO webhook_deliveries (id, subscription_id, event_id, event_type, body)
    SELECT 'whd_' || replace(gen_random_uuid()::text, '-', ''), s.id, ${event.id}::text, ${event.type}::text, ${deliveryBody(event)}::text
    FROM webhook_subscriptions s JOIN api_keys k ON k.id = s.key_id
    WHERE s.enabled AND ${event.type}::text = ANY(s.events) AND k.revoked_at IS NULL
      AND (k.tier = 'admin' OR s.key_id = ${keyId}::text OR (k.wallet IS NOT NULL AND lower(k.wallet) = ${wallet}::text))
    ON CONFLICT (subscription_id, event_id) DO NOTHING`
}

export interface FanoutOptions {
  nc: NatsConnection
  channels: AdminChannels
  db: PrismaClient
  log: Logger
  /** new deliveries are waiting: the sender need not wait for its next poll */
  onQueued: () => void
  /** how long an event taken by a replica stays its own before JetStream hands it to another (WEBHOOK_FANOUT_ACK_WAIT_MS) */
  ackWaitMs: number
}

/**
 * The durable consumer on the events stream, shared by admin replicas. A message that keeps
 * failing goes to the events stream's dead letters (a subject the fan-out does not read).
 */
export function startWebhookFanout({ nc, channels, db, log, onQueued, ackWaitMs }: FanoutOptions): Promise<WorkerLoop> {
  const { events } = channels
  return startDurableConsumer({
    nc,
    log,
    stream: events.streamSpec,
    durable: events.webhookConsumer,
    topic: events.all,
    deadLetterSubject: events.deadLetters,
    maxDeliveries: 5,
    // storing a batch takes milliseconds: an event taken by a replica that died comes back soon
    ackWaitMs,
    handle: async (batch) => {
      let queued = 0
      for (const { message } of batch) queued += await enqueueEvent(db, message)
      if (queued > 0) {
        log.debug({ queued, events: batch.length }, 'webhook deliveries queued')
        onQueued()
      }
    },
  })
}
