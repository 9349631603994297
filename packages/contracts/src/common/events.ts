import { Type, type Static } from 'typebox'
import { topic } from './messages.ts'
import { subjectOf } from './namespace.ts'
import { StrictObject, StringEnum } from './primitives.ts'

/**
 * The events a webhook subscription can ask for (docs/webhooks.md lists each one's `data`).
 * Each is written by the service whose state change causes it, in that change's transaction
 * (its outbox), published to the events stream, and delivered by admin to the subscriptions
 * of the event's owner.
 */
export const webhookEventTypes = [
  'job.completed',
  'job.failed',
  'job.cancelled',
  'job.awaiting_approval',
  'automation.run.succeeded',
  'automation.run.failed',
  'automation.completed',
  'swap.confirmed',
  'payment.settled',
  'payment.voided',
  'credit.topped_up',
  'credit.low',
] as const
export type WebhookEventType = (typeof webhookEventTypes)[number]
export const WebhookEventTypeSchema = StringEnum(webhookEventTypes, { description: 'an event type (docs/webhooks.md)' })

/**
 * The test event POST /webhooks/:id/test sends: only on request, to that one subscription. It is
 * never published, so no subscription asks for it and no service emits it; it shows in the
 * delivery log, hence the wider list for deliveries.
 */
export const webhookTestEventType = 'webhook.test'
export const deliveredEventTypes = [...webhookEventTypes, webhookTestEventType] as const
export type DeliveredEventType = (typeof deliveredEventTypes)[number]
export const DeliveredEventTypeSchema = StringEnum(deliveredEventTypes, {
  description: 'an event type (docs/webhooks.md); webhook.test: a test event, sent only on request (POST /webhooks/:id/test)',
})

/** Whose event it is: the API key that caused it, and/or the wallet it concerns (a payer, a key's bound wallet), lower-case. */
export const EventOwner = StrictObject({
  keyId: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  wallet: Type.Optional(Type.String({ pattern: '^0x[0-9a-f]{40}$' })),
})
export type EventOwner = Static<typeof EventOwner>

/** One event as services publish it to the events stream (message id = `id`, so a repeat is stored once). */
export const DomainEvent = Type.Object({
  id: Type.String({ pattern: '^evt_[A-Za-z0-9_-]{8,40}$' }),
  type: WebhookEventTypeSchema,
  /** when the state change happened, ms since the Unix epoch */
  at: Type.Integer({ minimum: 0 }),
  owner: EventOwner,
  data: Type.Record(Type.String(), Type.Unknown()),
})
export type DomainEvent = Static<typeof DomainEvent>

export function eventChannels(namespace: string) {
  const all = subjectOf(namespace, 'events', '>')
  /** where events the fan-out cannot store after bounded tries go (same stream, outside `all`'s subjects) */
  const deadLetters = subjectOf(namespace, 'webhooks', 'dead-letter')
  return {
    /** the subject of one event type: `<ns>.events.<type>` */
    subjectOf: (type: WebhookEventType) => subjectOf(namespace, 'events', type),
    /** any event, for consumers: `<ns>.events.>` */
    all: topic(all, DomainEvent),
    /** the durable consumer through which admin fans events out to webhook subscriptions */
    webhookConsumer: 'admin-webhook-fanout',
    deadLetters,
    streamSpec: { name: `${namespace}_events`, subjects: [all, deadLetters], maxAgeMs: 7 * 24 * 3600_000, duplicateWindowMs: 3600_000 },
  }
}
export type EventChannels = ReturnType<typeof eventChannels>
