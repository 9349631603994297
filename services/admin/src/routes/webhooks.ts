import { webhookRoutes, type WebhookTestResult } from '@ats/contracts'
import { Forbidden, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { WebhookSubscription } from '../generated/prisma/client.ts'
import { checkWebhookUrl, type UrlRules } from '../webhooks/urlRules.ts'
import { webhookOf, type Subscriptions, type Viewer } from '../webhooks/subscriptions.ts'

export interface WebhookRouteOptions {
  subscriptions: Subscriptions
  rules: UrlRules
  /** sends one test event to a subscription now and records it (webhooks/testEvent.ts) */
  sendTest: (subscription: WebhookSubscription) => Promise<WebhookTestResult>
  /** a redelivery is due now: the sender need not wait for its next poll */
  onQueued: () => void
}

/** The key asking; the gateway lets only readwrite and admin keys through. */
function viewerOf(request: FastifyRequest): Viewer {
  const { keyId, tier } = request.identity
  if (!keyId) throw new Forbidden('webhook subscriptions belong to API keys: call with one')
  return { keyId, admin: tier === 'admin' }
}

export async function webhooksRoutes(app: FastifyInstance, { subscriptions, rules, sendTest, onQueued }: WebhookRouteOptions) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...webhookRoutes.createWebhook,
    handler: async (request, reply) => {
      const viewer = viewerOf(request)
      await checkWebhookUrl(request.body.url, rules)
      const created = await subscriptions.create(viewer, request.body)
      request.log.info({ webhookId: created.id, keyId: viewer.keyId, events: created.events }, 'webhook subscription created')
      return reply.code(201).send(created)
    },
  })

  api.route({
    ...webhookRoutes.listWebhooks,
    handler: async (request) => ({ webhooks: await subscriptions.list(viewerOf(request)) }),
  })

  api.route({
    ...webhookRoutes.getWebhook,
    handler: async (request) => webhookOf(await subscriptions.owned(viewerOf(request), request.params.id)),
  })

  api.route({
    ...webhookRoutes.updateWebhook,
    handler: async (request) => {
      const viewer = viewerOf(request)
      await subscriptions.changeable(viewer, request.params.id)
      if (request.body.url !== undefined) await checkWebhookUrl(request.body.url, rules)
      const updated = await subscriptions.update(viewer, request.params.id, request.body)
      request.log.info({ webhookId: updated.id, by: viewer.keyId, enabled: updated.enabled }, 'webhook subscription changed')
      if (request.body.enabled) onQueued()
      return updated
    },
  })

  api.route({
    ...webhookRoutes.deleteWebhook,
    handler: async (request, reply) => {
      const viewer = viewerOf(request)
      await subscriptions.remove(viewer, request.params.id)
      request.log.info({ webhookId: request.params.id, by: viewer.keyId }, 'webhook subscription deleted')
      return reply.code(204).send(null)
    },
  })

  api.route({
    ...webhookRoutes.rotateWebhookSecret,
    handler: async (request) => {
      const viewer = viewerOf(request)
      const rotated = await subscriptions.rotate(viewer, request.params.id)
      request.log.info(
        { webhookId: request.params.id, by: viewer.keyId, previousSecretValidUntil: rotated.previousSecretValidUntil },
        'webhook secret rotated',
      )
      return rotated
    },
  })

  api.route({
    ...webhookRoutes.testWebhook,
    handler: async (request) => {
      const viewer = viewerOf(request)
      const sub = await subscriptions.changeable(viewer, request.params.id)
      const result = await sendTest(sub)
      request.log.info(
        {
          webhookId: sub.id,
          by: viewer.keyId,
          deliveryId: result.deliveryId,
          delivered: result.delivered,
          status: result.status,
          ms: result.durationMs,
        },
        'webhook test event sent',
      )
      return result
    },
  })

  api.route({
    ...webhookRoutes.listWebhookDeliveries,
    handler: async (request) => ({ deliveries: await subscriptions.deliveries(viewerOf(request), request.params.id, request.query) }),
  })

  api.route({
    ...webhookRoutes.redeliverWebhook,
    handler: async (request, reply) => {
      const viewer = viewerOf(request)
      const delivery = await subscriptions.redeliver(viewer, request.params.id, request.params.deliveryId)
      request.log.info({ webhookId: request.params.id, deliveryId: delivery.id, by: viewer.keyId }, 'webhook delivery queued again')
      onQueued()
      return reply.code(202).send(delivery)
    },
  })
}
