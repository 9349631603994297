// Deletes webhook deliveries that ended (succeeded, failed or cancelled) more than the retention
// ago, so the delivery log does not grow without bound. Pending deliveries are never touched.
// Every admin replica runs it: deleting old rows twice is harmless, and SKIP LOCKED keeps
// replicas (and a redeliver in progress) from waiting on each other.
import { startWorkerLoop, type Logger, type WorkerLoop } from '@ats/service-kit'
import type { PrismaClient } from '../generated/prisma/client.ts'

export interface DeliveryPurgeOptions {
  db: PrismaClient
  log: Logger
  /** deliveries that ended longer ago than this many days are deleted */
  retentionDays: number
  /** rows per DELETE: each statement holds its row locks only briefly; a full batch is followed by the next at once */
  batchSize?: number
  /** pause between passes */
  intervalMs?: number
}

/**
 * One batch of ended deliveries older than the retention; resolves with how many were deleted.
 * A succeeded delivery ended at `delivered_at` (the index on (status, delivered_at) finds them).
 * A failed one has no end time of its own: the sender sets no `delivered_at` on the final
 * failure, and `created_at` can be far older than the end (the retries take about a day, and a
 * redeliver starts a delivery over), so its end is its last try's time in the attempt log
 * (`at`, epoch milliseconds), `created_at` only if the log were empty. A cancelled one ended
 * at `cancelled_at`. Failed and cancelled rows are few, found through the status index. The
 * row locks of the inner SELECT re-check the conditions on the row's latest version, so a
 * delivery redelivered meanwhile (pending again) is not deleted.
 */
export function purgeDeliveries(db: PrismaClient, retentionDays: number, batchSize: number): Promise<number> {
  return db.$executeRaw`
    DELETE FROM webhook_deliveries WHERE id IN (
      SELECT id FROM webhook_deliveries
      WHERE (status = 'succeeded' AND delivered_at < now() - ${retentionDays} * interval '1 day')
        OR (status = 'failed'
          AND coalesce(to_timestamp((attempt_log -> -1 ->> 'at')::float8 / 1000), created_at) < now() - ${retentionDays} * interval '1 day')
        OR (status = 'cancelled' AND cancelled_at < now() - ${retentionDays} * interval '1 day')
      LIMIT ${batchSize}
      FOR UPDATE SKIP LOCKED)`
}

/** Purges old ended deliveries once at start, then every `intervalMs` (an hour), in batches; stop it before closing the database. */
export function startDeliveryPurge({
  db,
  log,
  retentionDays,
  batchSize = 5_000,
  intervalMs = 3_600_000,
}: DeliveryPurgeOptions): WorkerLoop {
  // rows deleted by the batches of the pass under way, logged once it ends
  let purged = 0
  return startWorkerLoop({
    name: 'webhook-delivery-purge',
    log,
    idleMs: intervalMs,
    round: async () => {
      const count = await purgeDeliveries(db, retentionDays, batchSize)
      purged += count
      if (count >= batchSize) return true
      if (purged > 0) log.info({ purged, retentionDays }, 'old webhook deliveries purged')
      purged = 0
      return false
    },
  })
}
