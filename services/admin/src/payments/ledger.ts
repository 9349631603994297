import { settleOnJobComplete, type PaymentCharged } from '@ats/contracts'
import { recordEvent, type CounterMetric, type EventOutbox, type ServiceMetrics } from '@ats/service-kit'
import { Prisma, type Payment, type PrismaClient, type SettlementState } from '../generated/prisma/client.ts'

export type PaymentRow = Payment

const dayMs = 86_400_000

/** What /metrics counts of the ledger: payments recorded (charged), and how their settlement ended. */
const countedStates = ['charged', 'settled', 'failed', 'voided'] as const
export type PaymentCounter = CounterMetric<{ state: typeof countedStates }>
export const paymentCounter = (metrics: ServiceMetrics): PaymentCounter =>
  metrics.counter({
    name: 'ats_payments_total',
    help: 'payments recorded in the ledger (charged; a job payment among them until its job ends), then settled, failed to settle, or voided',
    labels: { state: countedStates },
  })

/**
 * The state a charged payment is recorded in: a job's payment (`settle: on-job-complete`) is
 * held until its job's outcome is known, whether settlement is on or not (a void applies
 * either way); any other is due at once, or skipped when settlement is off.
 */
const stateOf = (e: PaymentCharged, settle: boolean): SettlementState =>
  e.settle === settleOnJobComplete && e.jobId ? 'held' : settle ? 'pending' : 'skipped'

/** The columns paymentEventData reads, for the RETURNING of an UPDATE of `payments p`. */
export const eventColumns = Prisma.sql`p.payer, p.nonce, p.amount, p.asset, p.network, p.chain_id AS "chainId", p.job_id AS "jobId", p.route`

/** What the payment.* webhook events say of a payment (docs/webhooks.md). */
export const paymentEventData = (p: Pick<Payment, 'payer' | 'nonce' | 'amount' | 'asset' | 'network' | 'chainId' | 'jobId' | 'route'>) => ({
  payer: p.payer.toLowerCase(),
  nonce: p.nonce,
  amount: String(p.amount),
  asset: p.asset,
  network: p.network,
  chainId: p.chainId,
  route: p.route,
  ...(p.jobId ? { jobId: p.jobId } : {}),
})

/**
 * Drops the kept settlement transactions none of whose payments is still settling (settled,
 * failed, or moved to another transaction): only those in flight are kept.
 */
const pruneKept = Prisma.sql`
  DELETE FROM settlement_transactions st
  WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.tx_hash = st.hash AND p.state = 'settling')`

/**
 * The payments ledger: every charged payment once (unique payer + nonce), its settlement
 * state, and the revenue figures. Revenue counts every payment that has not failed to
 * settle and was not voided (its job failed): those earned nothing.
 */
export function createLedger(
  db: PrismaClient,
  { settle, events, counted }: { settle: boolean; events: Pick<EventOutbox, 'send'>; counted: PaymentCounter },
) {
  const notEarning: SettlementState[] = ['failed', 'voided']
  const earning = { state: { notIn: notEarning } }
  return {
    /**
     * Records charged payments in one INSERT over arrays; ones already recorded are skipped.
     * Returns how many were new. (Prisma's createMany costs ~0.5 ms of CPU per row here;
     * this costs a few µs.)
     */
    async record(events: PaymentCharged[]): Promise<number> {
      if (events.length === 0) return 0
      const column = <T>(f: (e: PaymentCharged) => T) => events.map(f)
      const a = (e: PaymentCharged) => e.authorization
      const recorded = await db.$executeRaw`
        INSERT INTO payments (payer, pay_to, asset, chain_id, network, x402_version, amount, valid_after, valid_before,
          nonce, signature, method, route, resource, request_id, charged_at, job_id, state)
        SELECT * FROM unnest(
          ${column((e) => e.payer)}::text[], ${column((e) => e.payTo)}::text[],
          ${column((e) => e.asset)}::text[], ${column((e) => e.chainId)}::int[], ${column((e) => e.network)}::text[],
          ${column((e) => e.x402Version)}::smallint[], ${column((e) => a(e).value)}::bigint[], ${column((e) => a(e).validAfter)}::bigint[],
          ${column((e) => a(e).validBefore)}::bigint[], ${column((e) => a(e).nonce.toLowerCase())}::text[],
          ${column((e) => e.signature.toLowerCase())}::text[], ${column((e) => e.method)}::text[], ${column((e) => e.route)}::text[],
          ${column((e) => e.resource)}::text[], ${column((e) => e.requestId)}::text[],
          ${column((e) => new Date(e.chargedAt).toISOString())}::timestamptz[], ${column((e) => e.jobId ?? null)}::text[],
          ${column((e) => stateOf(e, settle))}::"SettlementState"[])
        ON CONFLICT (payer, nonce) DO NOTHING`
      // new rows only: a redelivered payment is not charged twice
      counted.inc({ state: 'charged' }, recorded)
      return recorded
    },

    /**
     * GET /admin/revenue's figures from one count by settlement state: what was earned (every
     * state but failed and voided), each state's count and sum (a held job payment counts as
     * pending), and the backlog still to settle with its oldest charge.
     */
    async totals() {
      const [byState, payers, oldest] = await Promise.all([
        db.payment.groupBy({ by: ['state'], _sum: { amount: true }, _count: { _all: true } }),
        db.payment.groupBy({ by: ['payer'], where: earning }),
        db.payment.findFirst({
          where: { state: { in: ['pending', 'held', 'settling'] } },
          orderBy: { chargedAt: 'asc' },
          select: { chargedAt: true },
        }),
      ])
      const states = ['pending', 'settling', 'settled', 'failed', 'skipped', 'voided'] as const
      const settlements = Object.fromEntries(states.map((s) => [s, { count: 0, totalUsdc: 0n }])) as Record<
        (typeof states)[number],
        { count: number; totalUsdc: bigint }
      >
      let [totalUsdc, requestCount] = [0n, 0]
      for (const row of byState) {
        const [count, amount] = [row._count._all, row._sum.amount ?? 0n]
        const entry = settlements[row.state === 'held' ? 'pending' : row.state]
        entry.count += count
        entry.totalUsdc += amount
        if (!notEarning.includes(row.state)) {
          totalUsdc += amount
          requestCount += count
        }
      }
      return {
        totalUsdc,
        requestCount,
        uniquePayers: payers.length,
        // payments voided (their job failed): not in the figures above
        voided: settlements.voided,
        settlements,
        backlog: { count: settlements.pending.count + settlements.settling.count, oldestPaidAt: oldest?.chargedAt ?? null },
      }
    },

    recent(limit: number): Promise<PaymentRow[]> {
      return db.payment.findMany({ orderBy: [{ chargedAt: 'desc' }, { id: 'desc' }], take: limit })
    },

    /** One entry per UTC day, oldest first, ending today; days without payments count 0. */
    async history(days: number, now = Date.now()) {
      const today = Math.floor(now / dayMs) * dayMs
      const from = new Date(today - (days - 1) * dayMs)
      const rows = await db.$queryRaw<Array<{ day: string; count: bigint; total: bigint | null }>>`
        SELECT to_char(charged_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*) AS count, sum(amount)::bigint AS total
        FROM payments
        WHERE charged_at >= ${from} AND state NOT IN ('failed', 'voided')
        GROUP BY 1`
      const byDay = new Map(rows.map((r) => [r.day, r]))
      return Array.from({ length: days }, (_, i) => {
        const date = new Date(from.getTime() + i * dayMs).toISOString().slice(0, 10)
        const row = byDay.get(date)
        return { date, count: Number(row?.count ?? 0), totalUsdc: row?.total ?? 0n }
      })
    },

    /**
     * Claims up to `limit` payments due for settlement, leasing them for `leaseMs`: replicas
     * never claim the same one, and one whose settler died is claimed again after the lease
     * (`pending` ones and `settling` ones alike: a retaken `settling` payment checks its kept
     * transaction). The state is left as it is: `settling` means a transaction is signed; its
     * bytes come with the payment (`rawTx`), from the payment or from the batch's kept transaction.
     */
    claimDue(limit: number, leaseMs: number): Promise<PaymentRow[]> {
      return db.$queryRaw<PaymentRow[]>`
        UPDATE payments SET attempts = attempts + 1,
          next_attempt_at = now() + ${leaseMs} * interval '1 millisecond'
        WHERE id IN (
          SELECT id FROM payments
          WHERE state IN ('pending', 'settling') AND next_attempt_at <= now()
          ORDER BY charged_at LIMIT ${limit}
          FOR UPDATE SKIP LOCKED)
        RETURNING id, payer, pay_to AS "payTo", asset, chain_id AS "chainId", network, x402_version AS "x402Version",
          amount, valid_after AS "validAfter", valid_before AS "validBefore", nonce, signature, method, route, resource,
          request_id AS "requestId", charged_at AS "chargedAt", recorded_at AS "recordedAt", state, attempts,
          next_attempt_at AS "nextAttemptAt", tx_hash AS "txHash", settle_error AS "settleError", settled_at AS "settledAt",
          COALESCE(raw_tx, (SELECT st.raw_tx FROM settlement_transactions st WHERE st.hash = payments.tx_hash)) AS "rawTx"`
    },

    /**
     * A settlement transaction of these payments is signed and about to be broadcast (called
     * before the broadcast): kept with its hash on every one of them, in one write, the payments
     * `settling`. If this settler dies now, the next one checks or rebroadcasts this transaction
     * instead of signing another.
     */
    async signed(ids: bigint[], tx: { hash: string; raw: string }): Promise<void> {
      await db.$executeRaw`
        WITH kept AS (INSERT INTO settlement_transactions (hash, raw_tx) VALUES (${tx.hash}, ${tx.raw}) ON CONFLICT (hash) DO NOTHING)
        UPDATE payments SET state = 'settling', tx_hash = ${tx.hash}, raw_tx = NULL WHERE id = ANY(${ids}::bigint[])`
    },

    /** Settled, each with its transaction, and `payment.settled` for the payers' webhooks recorded in the same transaction. */
    async settled(settlements: Array<{ id: bigint; txHash: string }>): Promise<void> {
      if (settlements.length === 0) return
      const eventIds = await db.$transaction(async (tx) => {
        const rows = await tx.$queryRaw<Array<Parameters<typeof paymentEventData>[0] & { txHash: string }>>`
          UPDATE payments p SET state = 'settled', tx_hash = s.tx_hash, settled_at = now(), settle_error = NULL
          FROM unnest(${settlements.map((s) => s.id)}::bigint[], ${settlements.map((s) => s.txHash)}::text[]) AS s(id, tx_hash)
          WHERE p.id = s.id
          RETURNING ${eventColumns}, p.tx_hash AS "txHash"`
        await tx.$executeRaw(pruneKept)
        const ids: string[] = []
        for (const p of rows) {
          ids.push(
            await recordEvent(tx, {
              type: 'payment.settled',
              owner: { wallet: p.payer },
              data: { ...paymentEventData(p), txHash: p.txHash },
            }),
          )
        }
        return ids
      })
      events.send(...eventIds)
      counted.inc({ state: 'settled' }, eventIds.length)
    },

    async failed(id: bigint, reason: string): Promise<void> {
      await db.$transaction([
        db.payment.update({ where: { id }, data: { state: 'failed', settleError: reason } }),
        db.$executeRaw(pruneKept),
      ])
      counted.inc({ state: 'failed' })
    },

    /** Claimed but not attempted: due again after `delayMs` (at once by default), the claim not counted as an attempt. */
    async release(ids: bigint[], delayMs = 0): Promise<void> {
      if (ids.length === 0) return
      await db.$executeRaw`
        UPDATE payments SET attempts = attempts - 1, next_attempt_at = now() + ${delayMs} * interval '1 millisecond'
        WHERE id = ANY(${ids}::bigint[])`
    },

    /** Tried again after `delayMs`; a payment with a kept transaction stays `settling`, one without is `pending`. */
    async retryLater(id: bigint, reason: string, delayMs: number): Promise<void> {
      await db.$executeRaw`
        UPDATE payments SET state = (CASE WHEN raw_tx IS NULL AND NOT EXISTS (SELECT 1 FROM settlement_transactions st WHERE st.hash = payments.tx_hash)
          THEN 'pending' ELSE 'settling' END)::"SettlementState",
          settle_error = ${reason}, next_attempt_at = now() + ${delayMs} * interval '1 millisecond'
        WHERE id = ${id}`
    },
  }
}

export type Ledger = ReturnType<typeof createLedger>
