// Webhook subscriptions and their delivery log, as their owners see them: a key sees and changes
// only its own, an admin key everyone's. Secrets leave only through create and rotate.
import { randomBytes } from 'node:crypto'
import {
  webhookTestEventType,
  type DeliveredEventType,
  type DeliveryAttempt,
  type DeliveryStatus,
  type UpdateWebhookBody,
  type Webhook,
  type WebhookDelivery,
  type WebhookEventType,
} from '@ats/contracts'
import { NotFound } from '@ats/service-kit'
import { TestEventNotRedelivered, TooManyWebhooks, WebhookOfRevokedKey } from '../errors.ts'
import type { PrismaClient, WebhookDelivery as DeliveryRow, WebhookSubscription } from '../generated/prisma/client.ts'
import { newWebhookSecret } from './signing.ts'

/** Who asks: the key, and whether it is an admin key (which sees every subscription). */
export interface Viewer {
  keyId: string
  admin: boolean
}

const newSubscriptionId = () => `whk_${randomBytes(12).toString('base64url')}`

export const webhookOf = (row: WebhookSubscription): Webhook => ({
  id: row.id,
  url: row.url,
  events: row.events as WebhookEventType[],
  description: row.description,
  enabled: row.enabled,
  disabledReason: row.disabledReason,
  createdAt: row.createdAt.getTime(),
  keyId: row.keyId,
})

const deliveryOf = (row: DeliveryRow): WebhookDelivery => {
  const log = row.attemptLog as DeliveryAttempt[]
  return {
    id: row.id,
    eventId: row.eventId,
    eventType: row.eventType as DeliveredEventType,
    status: row.status as DeliveryStatus,
    attempts: row.attempts,
    nextAttemptAt: row.status === 'pending' ? (row.nextAttemptAt?.getTime() ?? null) : null,
    lastAttempt: log.at(-1) ?? null,
    attemptLog: log,
    createdAt: row.createdAt.getTime(),
    deliveredAt: row.deliveredAt?.getTime() ?? null,
    cancelReason: row.cancelReason,
  }
}

export function createSubscriptions(db: PrismaClient, { maxPerKey, secretGraceMs }: { maxPerKey: number; secretGraceMs: number }) {
  /** the subscription if the viewer may see it; NotFound otherwise (another key's is not said to exist) */
  async function owned(viewer: Viewer, id: string): Promise<WebhookSubscription> {
    const row = await db.webhookSubscription.findUnique({ where: { id } })
    if (!row || (!viewer.admin && row.keyId !== viewer.keyId)) throw new NotFound(`webhook ${id}`)
    return row
  }

  /** owned, and its key not revoked: a revoked key's subscription stays disabled and is only read or deleted */
  async function changeable(viewer: Viewer, id: string): Promise<WebhookSubscription> {
    const row = await owned(viewer, id)
    const key = await db.apiKey.findUnique({ where: { id: row.keyId }, select: { revokedAt: true } })
    if (key?.revokedAt) throw new WebhookOfRevokedKey(row.id, row.keyId)
    return row
  }

  return {
    owned,
    changeable,

    async create(viewer: Viewer, input: { url: string; events: WebhookEventType[]; description?: string | undefined }) {
      const secret = newWebhookSecret()
      const row = await db.$transaction(async (tx) => {
        // one key's creations one after another, so two at once cannot both pass the limit
        await tx.$executeRaw`SELECT pg_advisory_xact_lock(hashtext(${`webhooks:${viewer.keyId}`}))`
        const count = await tx.webhookSubscription.count({ where: { keyId: viewer.keyId } })
        if (count >= maxPerKey) throw new TooManyWebhooks(count)
        return tx.webhookSubscription.create({
          data: {
            id: newSubscriptionId(),
            keyId: viewer.keyId,
            url: input.url,
            events: input.events,
            description: input.description ?? null,
            secret,
          },
        })
      })
      return { ...webhookOf(row), secret }
    },

    async list(viewer: Viewer): Promise<Webhook[]> {
      const rows = await db.webhookSubscription.findMany({
        where: viewer.admin ? {} : { keyId: viewer.keyId },
        orderBy: { createdAt: 'asc' },
      })
      return rows.map(webhookOf)
    },

    async update(viewer: Viewer, id: string, change: UpdateWebhookBody): Promise<Webhook> {
      await changeable(viewer, id)
      const row = await db.webhookSubscription.update({
        where: { id },
        data: {
          ...(change.url === undefined ? {} : { url: change.url }),
          ...(change.events === undefined ? {} : { events: change.events }),
          ...(change.description === undefined ? {} : { description: change.description }),
          // enabling starts the failure streak over; disabling by hand gives no reason (its owner knows)
          ...(change.enabled === undefined
            ? {}
            : { enabled: change.enabled, disabledReason: null, ...(change.enabled ? { failingSince: null } : {}) }),
          updatedAt: new Date(),
        },
      })
      return webhookOf(row)
    },

    async remove(viewer: Viewer, id: string): Promise<void> {
      await owned(viewer, id)
      await db.webhookSubscription.deleteMany({ where: { id } })
    },

    /** A new secret; the current one signs too until the grace period ends. */
    async rotate(viewer: Viewer, id: string): Promise<{ secret: string; previousSecretValidUntil: number }> {
      const current = await changeable(viewer, id)
      const secret = newWebhookSecret()
      const until = new Date(Date.now() + secretGraceMs)
      await db.webhookSubscription.update({
        where: { id },
        data: { secret, previousSecret: current.secret, previousSecretUntil: until, updatedAt: new Date() },
      })
      return { secret, previousSecretValidUntil: until.getTime() }
    },

    async deliveries(
      viewer: Viewer,
      id: string,
      query: { status?: DeliveryStatus | undefined; limit: number },
    ): Promise<WebhookDelivery[]> {
      await owned(viewer, id)
      const rows = await db.webhookDelivery.findMany({
        where: { subscriptionId: id, ...(query.status ? { status: query.status } : {}) },
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
        take: query.limit,
      })
      return rows.map(deliveryOf)
    },

    /** Queues a delivery again now: the same body and webhook-id, its tries counted afresh (the log kept). A test event is not. */
    async redeliver(viewer: Viewer, id: string, deliveryId: string): Promise<WebhookDelivery> {
      await changeable(viewer, id)
      const { count } = await db.webhookDelivery.updateMany({
        where: { id: deliveryId, subscriptionId: id, eventType: { not: webhookTestEventType } },
        data: {
          status: 'pending',
          attempts: 0,
          nextAttemptAt: new Date(),
          lockedUntil: null,
          deliveredAt: null,
          cancelledAt: null,
          cancelReason: null,
        },
      })
      if (count === 0) {
        const test = await db.webhookDelivery.count({ where: { id: deliveryId, subscriptionId: id } })
        throw test > 0 ? new TestEventNotRedelivered(deliveryId) : new NotFound(`delivery ${deliveryId}`)
      }
      return deliveryOf(await db.webhookDelivery.findUniqueOrThrow({ where: { id: deliveryId } }))
    },
  }
}

export type Subscriptions = ReturnType<typeof createSubscriptions>
