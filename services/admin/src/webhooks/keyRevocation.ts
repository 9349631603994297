// What revoking a key does to its webhooks: its subscriptions are disabled for good, saying why,
// and its pending deliveries are cancelled, so nothing queued before the revocation is sent after it.
import type { Prisma } from '../generated/prisma/client.ts'

export interface RetiredWebhooks {
  /** subscriptions of the key, all disabled now */
  disabled: number
  /** pending deliveries of those subscriptions, now cancelled */
  cancelled: number
}

/**
 * Run in the transaction that revokes the key; also by the sender for a delivery of a key it finds
 * revoked (queued by a fan-out that raced the revocation). Repeating it is harmless.
 */
export async function retireWebhooksOfKey(tx: Prisma.TransactionClient, keyId: string, revokedAt: Date): Promise<RetiredWebhooks> {
  const now = new Date()
  const subscriptions = await tx.webhookSubscription.updateMany({
    where: { keyId },
    // the same shape as a disable after failures ("disabled <when>: why")
    data: { enabled: false, disabledReason: `disabled ${revokedAt.toISOString()}: key revoked (${keyId})`, updatedAt: now },
  })
  const deliveries = await tx.webhookDelivery.updateMany({
    where: { status: 'pending', subscription: { keyId } },
    data: {
      status: 'cancelled',
      cancelledAt: now,
      cancelReason: `cancelled: key revoked ${revokedAt.toISOString()} (${keyId}), nothing more is sent`,
      nextAttemptAt: null,
    },
  })
  return { disabled: subscriptions.count, cancelled: deliveries.count }
}
