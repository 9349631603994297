// Publishes the ledger's adjustments (top-ups, releases, refunds) to the gateways, in entry order.
import type { creditChannels } from '@ats/contracts'
import { publishTraced, startWorkerLoop, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { PrismaClient } from '../generated/prisma/client.ts'

type CreditChannels = ReturnType<typeof creditChannels>

const batch = 256

/**
 * A gateway adds an adjustment to its copy once, by entry id; so a wallet's adjustments must reach
 * the stream in id order. One publisher at a time in the fleet (an advisory lock held for the
 * round) sends the unpublished ones oldest first and marks them, after their commit: `wake()`
 * runs a round at once, and every `sweepMs` a round picks up what a process that died left. A
 * repeat of a publish is dropped by JetStream (message id = entry id), and by the gateway's id check.
 */
export function startAdjustmentPublisher(db: PrismaClient, nc: NatsConnection, channels: CreditChannels, log: Logger, sweepMs: number) {
  const js = nc.jetstream()
  return startWorkerLoop({
    name: 'credit-adjustments',
    log,
    idleMs: sweepMs,
    round: () =>
      db.$transaction(
        async (tx) => {
          await tx.$executeRaw`SELECT pg_advisory_xact_lock(hashtextextended('ats:credit:adjustments', 0))`
          const rows = await tx.$queryRaw<
            Array<{ id: bigint; wallet: string; kind: 'topup' | 'release' | 'refund'; amount: bigint; at: Date }>
          >`
            SELECT id, wallet, kind, amount, at FROM credit_entries
            WHERE published_at IS NULL AND kind IN ('topup', 'release', 'refund')
            ORDER BY id LIMIT ${batch}`
          if (rows.length === 0) return false
          // sent in order on one connection: the stream stores them in that order
          await Promise.all(
            rows.map((r) =>
              publishTraced(
                js,
                channels.adjusted.subject,
                channels.adjusted.message.encode({
                  wallet: r.wallet,
                  entry: String(r.id),
                  delta: String(r.amount),
                  reason: r.kind,
                  at: r.at.getTime(),
                }),
                { msgID: `credit-adjusted:${r.id}`, timeout: 5_000 },
              ),
            ),
          )
          await tx.$executeRaw`UPDATE credit_entries SET published_at = now() WHERE id = ANY(${rows.map((r) => String(r.id))}::bigint[])`
          log.debug({ count: rows.length, last: String(rows.at(-1)!.id) }, 'credit adjustments published')
          return rows.length === batch
        },
        { timeout: 30_000 },
      ),
  })
}
