import { Type, type Static } from 'typebox'
import { DeliveredEventTypeSchema, WebhookEventTypeSchema } from '../common/events.ts'
import { ErrorBody, keyRouteErrors } from '../common/errors.ts'
import { EpochMs, StrictObject, StringEnum } from '../common/primitives.ts'
import { IdParams, route } from '../common/route.ts'

/**
 * Webhook subscriptions of an API key (docs/webhooks.md): admin delivers the events of the key's
 * owner to its URL, signed per Standard Webhooks, at least once, retried for about a day.
 */

const WebhookUrl = Type.String({
  minLength: 1,
  maxLength: 2048,
  description:
    'where deliveries are POSTed: https (http only with WEBHOOK_ALLOW_HTTP), no credentials, a host that does not resolve to a loopback, private, link-local or metadata address',
})
const Events = Type.Array(WebhookEventTypeSchema, {
  minItems: 1,
  maxItems: 20,
  uniqueItems: true,
  description: 'the event types to deliver',
})
const Description = Type.String({ maxLength: 200, description: 'for people' })

export const Webhook = Type.Object({
  id: Type.String({ description: 'whk_…' }),
  url: Type.String(),
  events: Type.Array(WebhookEventTypeSchema),
  description: Type.Union([Type.String(), Type.Null()]),
  enabled: Type.Boolean({
    description:
      'false: nothing is delivered (disabled by its owner, after failing for WEBHOOK_DISABLE_AFTER_MS, or because its key was revoked: disabledReason)',
  }),
  disabledReason: Type.Union([Type.String(), Type.Null()], { description: 'why it was disabled, and since when' }),
  createdAt: EpochMs(),
  keyId: Type.String({ description: 'the API key that owns it' }),
})
export type Webhook = Static<typeof Webhook>

export const CreatedWebhook = Type.Intersect([
  Webhook,
  Type.Object({
    secret: Type.String({ description: 'whsec_…: verify signatures with it; shown in this answer only (rotate to get a new one)' }),
  }),
])

export const CreateWebhookBody = StrictObject({ url: WebhookUrl, events: Events, description: Type.Optional(Description) })

export const UpdateWebhookBody = StrictObject(
  {
    url: Type.Optional(WebhookUrl),
    events: Type.Optional(Events),
    enabled: Type.Optional(
      Type.Boolean({ description: 'true re-enables a disabled subscription (its failure streak starts over); false pauses it' }),
    ),
    // null first: validation would turn null into "" for a string
    description: Type.Optional(Type.Union([Type.Null(), Description], { description: 'for people; null clears it' })),
  },
  { minProperties: 1 },
)
export type UpdateWebhookBody = Static<typeof UpdateWebhookBody>

export const RotatedSecret = Type.Object({
  secret: Type.String({ description: 'the new whsec_… secret; shown in this answer only' }),
  previousSecretValidUntil: EpochMs('until then deliveries are signed with both secrets (WEBHOOK_SECRET_GRACE_MS after the rotation)'),
})

export const deliveryStatuses = ['pending', 'succeeded', 'failed', 'cancelled'] as const
export type DeliveryStatus = (typeof deliveryStatuses)[number]
const DeliveryStatusSchema = StringEnum(deliveryStatuses, {
  description:
    'pending: to be tried (again) at nextAttemptAt; succeeded: answered 2xx; failed: every try of the retry schedule failed; cancelled: not sent (any more), cancelReason says why',
})

export const DeliveryAttempt = Type.Object({
  at: EpochMs(),
  status: Type.Optional(Type.Integer({ description: 'the HTTP status, when an answer came' })),
  error: Type.Optional(Type.String({ description: 'why it failed without an answer (timeout, refused address, redirect not followed…)' })),
  durationMs: Type.Integer(),
  response: Type.Optional(Type.String({ description: 'the first bytes of the answer' })),
})
export type DeliveryAttempt = Static<typeof DeliveryAttempt>

export const WebhookDelivery = Type.Object({
  id: Type.String({ description: 'whd_…' }),
  eventId: Type.String({ description: 'evt_…: the webhook-id header, the same on every try' }),
  eventType: DeliveredEventTypeSchema,
  status: DeliveryStatusSchema,
  attempts: Type.Integer({ description: 'tries since it was queued (a redeliver starts over)' }),
  nextAttemptAt: Type.Union([EpochMs(), Type.Null()], { description: 'pending: when it is tried next' }),
  lastAttempt: Type.Union([DeliveryAttempt, Type.Null()]),
  attemptLog: Type.Array(DeliveryAttempt, { description: 'the last 20 tries, oldest first' }),
  createdAt: EpochMs(),
  deliveredAt: Type.Union([EpochMs(), Type.Null()]),
  cancelReason: Type.Union([Type.String(), Type.Null()], {
    description: 'cancelled: when and why it was not sent (its key was revoked)',
  }),
})
export type WebhookDelivery = Static<typeof WebhookDelivery>

export const WebhookTestResult = Type.Object({
  delivered: Type.Boolean({ description: 'the receiver answered 2xx' }),
  status: Type.Optional(Type.Integer({ description: "the receiver's HTTP status, when an answer came" })),
  error: Type.Optional(
    Type.String({
      description: 'why it failed: no answer (timeout, connection refused…), a refused address, a redirect, a non-2xx status',
    }),
  ),
  durationMs: Type.Integer(),
  response: Type.Optional(Type.String({ description: 'the first bytes of the answer (at most 4 KB)' })),
  eventId: Type.String({ description: 'evt_…: the webhook-id header of the test event' }),
  deliveryId: Type.String({ description: 'whd_…: the try as GET /webhooks/:id/deliveries lists it' }),
})
export type WebhookTestResult = Static<typeof WebhookTestResult>

const DeliveryParams = Type.Object({ ...IdParams.properties, deliveryId: Type.String({ minLength: 1, maxLength: 64 }) })
export const DeliveriesQuery = StrictObject({
  status: Type.Optional(DeliveryStatusSchema),
  limit: Type.Integer({ minimum: 1, maximum: 200, default: 50 }),
})

const notFound = { 404: ErrorBody }

export const webhookRoutes = {
  createWebhook: route({
    method: 'POST',
    url: '/webhooks',
    summary: "Subscribe a URL to events of this key's owner (signed per Standard Webhooks); the secret is in this answer only",
    schema: { body: CreateWebhookBody, response: { 201: CreatedWebhook, 409: ErrorBody, ...keyRouteErrors } },
  }),
  listWebhooks: route({
    method: 'GET',
    url: '/webhooks',
    summary: "This key's webhook subscriptions (an admin key: everyone's), oldest first; no secrets",
    schema: { response: { 200: Type.Object({ webhooks: Type.Array(Webhook) }), ...keyRouteErrors } },
  }),
  getWebhook: route({
    method: 'GET',
    url: '/webhooks/:id',
    summary: 'One webhook subscription',
    schema: { params: IdParams, response: { 200: Webhook, ...notFound, ...keyRouteErrors } },
  }),
  updateWebhook: route({
    method: 'PATCH',
    url: '/webhooks/:id',
    summary:
      'Change the URL, events or description of a subscription, or disable it or enable it again (not when its key was revoked: 409)',
    schema: { params: IdParams, body: UpdateWebhookBody, response: { 200: Webhook, 409: ErrorBody, ...notFound, ...keyRouteErrors } },
  }),
  deleteWebhook: route({
    method: 'DELETE',
    url: '/webhooks/:id',
    summary: 'Delete a subscription and its delivery log; nothing more is sent to it',
    schema: { params: IdParams, response: { 204: Type.Null(), ...notFound, ...keyRouteErrors } },
  }),
  rotateWebhookSecret: route({
    method: 'POST',
    url: '/webhooks/:id/rotate-secret',
    summary:
      'A new signing secret; the old one stays valid WEBHOOK_SECRET_GRACE_MS (deliveries carry both signatures meanwhile); 409 when its key was revoked',
    schema: { params: IdParams, response: { 200: RotatedSecret, 409: ErrorBody, ...notFound, ...keyRouteErrors } },
  }),
  testWebhook: route({
    method: 'POST',
    url: '/webhooks/:id/test',
    summary:
      'Send one signed webhook.test event to the URL now (also when disabled) and answer how the receiver took it; one try, not retried, logged as a delivery; 409 when its key was revoked',
    schema: { params: IdParams, response: { 200: WebhookTestResult, 409: ErrorBody, ...notFound, ...keyRouteErrors } },
  }),
  listWebhookDeliveries: route({
    method: 'GET',
    url: '/webhooks/:id/deliveries',
    summary: 'The delivery log of a subscription, newest first: status, tries, the last answers',
    schema: {
      params: IdParams,
      querystring: DeliveriesQuery,
      response: { 200: Type.Object({ deliveries: Type.Array(WebhookDelivery) }), ...notFound, ...keyRouteErrors },
    },
  }),
  redeliverWebhook: route({
    method: 'POST',
    url: '/webhooks/:id/deliveries/:deliveryId/redeliver',
    summary:
      'Queue a delivery again now (same webhook-id, tries counted afresh); a webhook.test one, or one of a revoked key, is not (409)',
    schema: { params: DeliveryParams, response: { 202: WebhookDelivery, 409: ErrorBody, ...notFound, ...keyRouteErrors } },
  }),
}
