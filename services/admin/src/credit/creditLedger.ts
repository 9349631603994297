// The prepaid-credit ledger: every movement of a wallet's credit once (unique wallet + kind + ref),
// the accounts they add up to, holds of metered work and their usage reports, settled top-ups, and
// the webhook events of credit (credit.topped_up, credit.low).
import type { CreditDebit, CreditEntryKind, CreditUsage } from '@ats/contracts'
import { recordEvent, type EventOutbox, type EventToRecord } from '@ats/service-kit'
import { getAddress } from 'viem'
import type { Prisma, PrismaClient } from '../generated/prisma/client.ts'

type Tx = Prisma.TransactionClient

/** What each kind does to an account: [balance, held] per unit of its amount. */
const effects: Record<CreditEntryKind, readonly [bigint, bigint]> = {
  topup: [1n, 0n],
  debit: [-1n, 0n],
  hold: [0n, 1n],
  capture: [-1n, -1n],
  release: [0n, -1n],
  withdraw: [-1n, 0n],
  refund: [1n, 0n],
}

/** The entries that give credit back: published to the gateways as `CreditAdjusted`, in id order. */
const adjustmentKinds = ['topup', 'release', 'refund'] as const
const isAdjustment = (kind: CreditEntryKind) => (adjustmentKinds as readonly string[]).includes(kind)

export interface NewEntry {
  wallet: string
  kind: CreditEntryKind
  ref: string
  amount: bigint
  route?: string | null
  detail?: unknown
  at: Date
}

type Inserted = Pick<NewEntry, 'wallet' | 'kind' | 'ref' | 'amount'> & { id: bigint }

interface Writer {
  tx: Tx
  /** records entries not recorded yet and moves their accounts; returns the new ones */
  add(entries: NewEntry[]): Promise<Inserted[]>
  event(event: EventToRecord): Promise<void>
}

interface HoldToClose {
  wallet: string
  id: string
  amount: bigint
  /** the usage report; null: none came (released in full) */
  usage: CreditUsage | null
  reason?: string
}

export interface CreditLedgerOptions {
  events: Pick<EventOutbox, 'send'>
  /** CREDIT_LOW_BALANCE */
  lowBalance: bigint
  /** an adjustment was committed: the publisher sends it to the gateways */
  onAdjusted(): void
}

export function createCreditLedger(db: PrismaClient, { events, lowBalance, onAdjusted }: CreditLedgerOptions) {
  /**
   * Every change of a wallet's credit runs under that wallet's lock (advisory, taken in address
   * order so batches cannot deadlock): entries of one wallet get their ids in commit order, so a
   * snapshot that includes an adjustment includes every earlier one, and a hold and its usage
   * report, arriving at once, never miss each other.
   */
  async function inTransaction<T>(wallets: string[], fn: (w: Writer) => Promise<T>): Promise<T> {
    const touched = [...new Set(wallets)].sort()
    const eventIds: string[] = []
    let adjusted = false
    const result = await db.$transaction(
      async (tx) => {
        await tx.$executeRaw`
          SELECT pg_advisory_xact_lock(hashtextextended('ats:credit:' || w, 0))
          FROM (SELECT unnest(${touched}::text[]) AS w ORDER BY 1 OFFSET 0) AS ordered`
        const writer: Writer = {
          tx,
          async add(entries) {
            const inserted = await insertEntries(tx, entries)
            if (inserted.some((e) => isAdjustment(e.kind))) adjusted = true
            return inserted
          },
          async event(event) {
            eventIds.push(await recordEvent(tx, event))
          },
        }
        const out = await fn(writer)
        eventIds.push(...(await lowBalanceEvents(tx, touched)))
        return out
      },
      { timeout: 30_000 },
    )
    if (eventIds.length > 0) events.send(...eventIds)
    if (adjusted) onAdjusted()
    return result
  }

  /** credit.low for each wallet that fell under the threshold since it last stood above it */
  async function lowBalanceEvents(tx: Tx, wallets: string[]): Promise<string[]> {
    const changed = await tx.$queryRaw<Array<{ wallet: string; low: boolean; available: string }>>`
      UPDATE credit_accounts SET low_notified = (balance - held < ${lowBalance})
      WHERE wallet = ANY(${wallets}::text[]) AND low_notified <> (balance - held < ${lowBalance})
      RETURNING wallet, low_notified AS low, (balance - held)::text AS available`
    const ids: string[] = []
    for (const a of changed.filter((c) => c.low)) {
      ids.push(
        await recordEvent(tx, {
          type: 'credit.low',
          owner: { wallet: a.wallet },
          data: { wallet: a.wallet, available: a.available, threshold: String(lowBalance) },
        }),
      )
    }
    return ids
  }

  async function insertEntries(tx: Tx, entries: NewEntry[]): Promise<Inserted[]> {
    if (entries.length === 0) return []
    const column = <T>(f: (e: NewEntry) => T) => entries.map(f)
    const inserted = await tx.$queryRaw<Inserted[]>`
      INSERT INTO credit_entries (wallet, kind, ref, amount, route, detail, at)
      SELECT * FROM unnest(${column((e) => e.wallet)}::text[], ${column((e) => e.kind)}::"CreditEntryKind"[],
        ${column((e) => e.ref)}::text[], ${column((e) => String(e.amount))}::bigint[], ${column((e) => e.route ?? null)}::text[],
        ${column((e) => (e.detail === undefined ? null : JSON.stringify(e.detail)))}::jsonb[], ${column((e) => e.at.toISOString())}::timestamptz[])
      ON CONFLICT (wallet, kind, ref) DO NOTHING
      RETURNING id, wallet, kind, ref, amount`
    const deltas = new Map<string, { balance: bigint; held: bigint }>()
    for (const e of inserted) {
      const [b, h] = effects[e.kind]
      const d = deltas.get(e.wallet) ?? { balance: 0n, held: 0n }
      d.balance += b * e.amount
      d.held += h * e.amount
      deltas.set(e.wallet, d)
    }
    if (deltas.size > 0) {
      const wallets = [...deltas.keys()]
      await tx.$executeRaw`
        INSERT INTO credit_accounts (wallet, balance, held, updated_at)
        SELECT w, b, h, now() FROM unnest(${wallets}::text[], ${wallets.map((w) => String(deltas.get(w)!.balance))}::bigint[],
          ${wallets.map((w) => String(deltas.get(w)!.held))}::bigint[]) AS d(w, b, h)
        ON CONFLICT (wallet) DO UPDATE SET balance = credit_accounts.balance + excluded.balance,
          held = credit_accounts.held + excluded.held, updated_at = now()`
    }
    return inserted
  }

  /** Closes open holds: what the usage report kept (at most the hold) is captured, the rest released. */
  async function closeHolds(w: Writer, holds: HoldToClose[]) {
    if (holds.length === 0) return
    const entries: NewEntry[] = []
    const closed = holds.map((h) => {
      const asked = h.usage ? BigInt(h.usage.amount) : 0n
      const kept = asked < h.amount ? asked : h.amount
      const detail = h.usage
        ? { outcome: h.usage.outcome, usage: h.usage.usage, ...(h.usage.reason ? { reason: h.usage.reason } : {}) }
        : { reason: h.reason }
      const at = new Date(h.usage?.at ?? Date.now())
      if (kept > 0n) entries.push({ wallet: h.wallet, kind: 'capture', ref: h.id, amount: kept, detail, at })
      if (h.amount - kept > 0n) entries.push({ wallet: h.wallet, kind: 'release', ref: h.id, amount: h.amount - kept, detail, at })
      return { ...h, kept, state: kept > 0n ? 'captured' : 'released' }
    })
    await w.add(entries)
    await w.tx.$executeRaw`
      UPDATE credit_holds h SET state = x.s, kept = x.k, usage = coalesce(x.u, h.usage), resolved_at = now(),
        reported_at = CASE WHEN x.u IS NULL THEN h.reported_at ELSE coalesce(h.reported_at, now()) END
      FROM unnest(${closed.map((c) => c.wallet)}::text[], ${closed.map((c) => c.id)}::text[], ${closed.map((c) => c.state)}::text[],
        ${closed.map((c) => String(c.kept))}::bigint[], ${closed.map((c) => (c.usage ? JSON.stringify(c.usage) : null))}::jsonb[]) AS x(w, i, s, k, u)
      WHERE h.wallet = x.w AND h.id = x.i`
  }

  return {
    /**
     * Records what gateways took (debits, holds, withdrawals), each once however often it is
     * delivered. A hold whose usage report came first is closed at once. Returns how many were new.
     * One statement writes the entries, moves their accounts and opens the holds, returning only
     * the holds whose report was waiting: a batch costs the same few round trips whatever its size,
     * and its debits go as one JSON parameter (Prisma's cost grows with every array element it binds).
     */
    async recordDebits(debits: CreditDebit[]): Promise<number> {
      const wallets = debits.map((d) => d.wallet.toLowerCase())
      return inTransaction(wallets, async (w) => {
        const [result] = await w.tx.$queryRaw<
          Array<{ recorded: number; waited: Array<{ wallet: string; id: string; amount: string; usage: CreditUsage }> | null }>
        >`
          WITH entered AS (
            INSERT INTO credit_entries (wallet, kind, ref, amount, route, at)
            SELECT lower(d.wallet), d.kind::"CreditEntryKind", d.id, d.amount, d.route, to_timestamp(d.at / 1000.0)
            FROM jsonb_to_recordset(${JSON.stringify(debits)}::jsonb) AS d(id text, wallet text, kind text, amount bigint, route text, at bigint)
            ON CONFLICT (wallet, kind, ref) DO NOTHING
            RETURNING wallet, kind, ref, amount),
          moved AS (
            INSERT INTO credit_accounts (wallet, balance, held, updated_at)
            SELECT wallet, coalesce(-sum(amount) FILTER (WHERE kind <> 'hold'), 0), coalesce(sum(amount) FILTER (WHERE kind = 'hold'), 0), now()
            FROM entered GROUP BY wallet
            ON CONFLICT (wallet) DO UPDATE SET balance = credit_accounts.balance + excluded.balance,
              held = credit_accounts.held + excluded.held, updated_at = now()),
          opened AS (
            INSERT INTO credit_holds (wallet, id, amount, state, opened_at)
            SELECT wallet, ref, amount, 'open', now() FROM entered WHERE kind = 'hold'
            ON CONFLICT (wallet, id) DO UPDATE SET amount = excluded.amount, opened_at = excluded.opened_at
              WHERE credit_holds.state IN ('reported', 'orphaned')
            RETURNING wallet, id, amount, usage)
          SELECT (SELECT count(*) FROM entered)::int AS recorded,
            (SELECT json_agg(json_build_object('wallet', wallet, 'id', id, 'amount', amount::text, 'usage', usage))
              FROM opened WHERE usage IS NOT NULL) AS waited`
        // a report that waited for its hold (or gave up waiting) is applied now
        const waited = result!.waited ?? []
        await closeHolds(
          w,
          waited.map((h) => ({ wallet: h.wallet, id: h.id, amount: BigInt(h.amount), usage: h.usage })),
        )
        return result!.recorded
      })
    },

    /**
     * Closes the holds these reports name (the first report of a hold counts); a report whose hold
     * is not recorded yet waits for it. Returns what became of each.
     */
    async recordUsage(reports: CreditUsage[]) {
      const first = new Map<string, CreditUsage>()
      for (const u of reports) {
        const key = `${u.wallet.toLowerCase()}:${u.hold}`
        if (!first.has(key)) first.set(key, { ...u, wallet: u.wallet.toLowerCase() })
      }
      const usage = [...first.values()]
      return inTransaction(
        usage.map((u) => u.wallet),
        async (w) => {
          const holds = await w.tx.$queryRaw<Array<{ wallet: string; id: string; state: string; amount: bigint | null }>>`
            SELECT h.wallet, h.id, h.state, h.amount FROM credit_holds h
            JOIN unnest(${usage.map((u) => u.wallet)}::text[], ${usage.map((u) => u.hold)}::text[]) AS x(w, i) ON h.wallet = x.w AND h.id = x.i`
          const known = new Map(holds.map((h) => [`${h.wallet}:${h.id}`, h]))
          const toClose: HoldToClose[] = []
          const waiting: CreditUsage[] = []
          const ignored: Array<{ hold: string; state: string }> = []
          for (const u of usage) {
            const h = known.get(`${u.wallet}:${u.hold}`)
            if (!h) waiting.push(u)
            else if (h.state === 'open') toClose.push({ wallet: u.wallet, id: u.hold, amount: h.amount!, usage: u })
            else ignored.push({ hold: u.hold, state: h.state })
          }
          await closeHolds(w, toClose)
          if (waiting.length > 0) {
            await w.tx.$executeRaw`
              INSERT INTO credit_holds (wallet, id, state, usage, reported_at)
              SELECT w, i, 'reported', u, now() FROM unnest(${waiting.map((u) => u.wallet)}::text[], ${waiting.map((u) => u.hold)}::text[],
                ${waiting.map((u) => JSON.stringify(u))}::jsonb[]) AS x(w, i, u)
              ON CONFLICT (wallet, id) DO NOTHING`
          }
          return { closed: toClose.length, waiting: waiting.length, ignored }
        },
      )
    },

    /**
     * Holds without a usage report after `timeoutMs` are released in full (no work reported, no
     * money moves); reports whose hold never came are marked orphaned. Returns what it did.
     */
    async expireHolds(timeoutMs: number, limit = 500) {
      const due = await db.$queryRaw<Array<{ wallet: string; id: string }>>`
        SELECT wallet, id FROM credit_holds
        WHERE state IN ('open', 'reported') AND created_at < now() - ${timeoutMs} * interval '1 millisecond'
        ORDER BY created_at LIMIT ${limit}`
      if (due.length === 0) return { released: [], orphaned: [] }
      return inTransaction(
        due.map((d) => d.wallet),
        async (w) => {
          const still = await w.tx.$queryRaw<Array<{ wallet: string; id: string; state: string; amount: bigint | null }>>`
            SELECT h.wallet, h.id, h.state, h.amount FROM credit_holds h
            JOIN unnest(${due.map((d) => d.wallet)}::text[], ${due.map((d) => d.id)}::text[]) AS x(w, i) ON h.wallet = x.w AND h.id = x.i
            WHERE h.state IN ('open', 'reported')`
          const reason = `no usage report within ${timeoutMs} ms (CREDIT_HOLD_TIMEOUT_MS): released in full`
          const released = still
            .filter((h) => h.state === 'open')
            .map((h) => ({ wallet: h.wallet, id: h.id, amount: h.amount!, usage: null, reason }))
          await closeHolds(w, released)
          const orphaned = still.filter((h) => h.state === 'reported').map((h) => ({ wallet: h.wallet, id: h.id }))
          if (orphaned.length > 0) {
            await w.tx.$executeRaw`
              UPDATE credit_holds h SET state = 'orphaned'
              FROM unnest(${orphaned.map((o) => o.wallet)}::text[], ${orphaned.map((o) => o.id)}::text[]) AS x(w, i)
              WHERE h.wallet = x.w AND h.id = x.i`
          }
          return { released, orphaned }
        },
      )
    },

    /** A paid POST /credit/topup: pending until its payment (payer + nonce in payments) settles. */
    async topUpPaid(wallet: string, nonce: string, amount: bigint): Promise<void> {
      await db.$executeRaw`
        INSERT INTO credit_topups (wallet, nonce, amount) VALUES (${wallet}, ${nonce}, ${amount})
        ON CONFLICT (wallet, nonce) DO NOTHING`
    },

    /**
     * Credits pending top-ups whose payment settled (the payment's amount, once: the entry's ref
     * is the payment nonce), fails those whose payment failed or was voided, and expires those
     * whose payment never reached the ledger within a day (the gateway did not charge it). Returns
     * the credited ones.
     */
    async creditTopUps(limit = 500): Promise<Array<{ wallet: string; nonce: string; amount: bigint }>> {
      const pending = await db.$queryRaw<Array<{ wallet: string; nonce: string; old: boolean }>>`
        SELECT wallet, nonce, created_at < now() - interval '1 day' AS old
        FROM credit_topups WHERE state = 'pending' ORDER BY created_at LIMIT ${limit}`
      if (pending.length === 0) return []
      // the ledger keeps the payer as the gateway wrote it (checksummed): both spellings are looked up
      const payments = await db.$queryRaw<Array<{ wallet: string; nonce: string; state: string; amount: bigint; txHash: string | null }>>`
        SELECT x.w AS wallet, p.nonce, p.state::text AS state, p.amount, p.tx_hash AS "txHash"
        FROM unnest(${pending.map((p) => p.wallet)}::text[], ${pending.map((p) => getAddress(p.wallet))}::text[],
          ${pending.map((p) => p.nonce)}::text[]) AS x(w, c, n)
        JOIN payments p ON p.payer IN (x.w, x.c) AND p.nonce = x.n`
      const paymentOf = new Map(payments.map((p) => [`${p.wallet}:${p.nonce}`, p]))
      const ended = payments.filter((p) => ['settled', 'failed', 'voided'].includes(p.state))
      const moves = [
        ...ended.map((p) => ({ wallet: p.wallet, nonce: p.nonce, state: p.state === 'settled' ? 'credited' : 'failed' })),
        // no payment a day after it was answered: the gateway never charged it
        ...pending.filter((p) => p.old && !paymentOf.has(`${p.wallet}:${p.nonce}`)).map((p) => ({ ...p, state: 'expired' })),
      ]
      if (moves.length === 0) return []
      return inTransaction(
        moves.map((m) => m.wallet),
        async (w) => {
          const moved = await w.tx.$queryRaw<Array<{ wallet: string; nonce: string; state: string }>>`
            UPDATE credit_topups t SET state = x.s, credited_at = CASE WHEN x.s = 'credited' THEN now() END
            FROM unnest(${moves.map((m) => m.wallet)}::text[], ${moves.map((m) => m.nonce)}::text[], ${moves.map((m) => m.state)}::text[]) AS x(w, n, s)
            WHERE t.wallet = x.w AND t.nonce = x.n AND t.state = 'pending'
            RETURNING t.wallet, t.nonce, t.state`
          const credited = moved.filter((m) => m.state === 'credited').map((m) => paymentOf.get(`${m.wallet}:${m.nonce}`)!)
          const now = new Date()
          await w.add(
            credited.map((c) => ({
              wallet: c.wallet,
              kind: 'topup' as const,
              ref: c.nonce,
              amount: c.amount,
              route: 'POST /credit/topup',
              detail: { txHash: c.txHash },
              at: now,
            })),
          )
          for (const c of credited) {
            await w.event({
              type: 'credit.topped_up',
              owner: { wallet: c.wallet },
              data: { wallet: c.wallet, amount: String(c.amount), nonce: c.nonce, txHash: c.txHash },
            })
          }
          return credited.map((c) => ({ wallet: c.wallet, nonce: c.nonce, amount: c.amount }))
        },
      )
    },

    /** Gives a withdrawal that will not be paid back (entry `refund`, ref = its key), once. */
    async refund(wallet: string, ref: string, amount: bigint, reason: string): Promise<void> {
      await inTransaction([wallet], (w) => w.add([{ wallet, kind: 'refund', ref, amount, detail: { reason }, at: new Date() }]))
    },

    /** The entry a gateway recorded for a movement, if the ledger has it. */
    entry(wallet: string, kind: CreditEntryKind, ref: string) {
      return db.creditEntry.findUnique({ where: { wallet_kind_ref: { wallet, kind, ref } } })
    },

    /**
     * GET /credit's figures, read in one snapshot (repeatable read): the balance and the entries
     * that make it agree even while a top-up or a debit is being written.
     */
    async account(wallet: string) {
      const [account, pending, recent] = await db.$transaction(
        [
          db.creditAccount.findUnique({ where: { wallet } }),
          db.creditTopUp.findMany({ where: { wallet, state: 'pending' }, orderBy: { createdAt: 'desc' }, take: 50 }),
          db.creditEntry.findMany({ where: { wallet }, orderBy: { id: 'desc' }, take: 20 }),
        ],
        { isolationLevel: 'RepeatableRead' },
      )
      const balance = account?.balance ?? 0n
      const held = account?.held ?? 0n
      return { wallet, balance, held, available: balance - held, pending, recent }
    },

    /**
     * The available credit and the last adjustment it includes, read in one statement: since a
     * wallet's entries are written under its lock, every adjustment up to `entry` is in `available`.
     */
    async snapshot(wallet: string): Promise<{ available: bigint; entry: bigint }> {
      const [row] = await db.$queryRaw<Array<{ available: bigint; entry: bigint }>>`
        SELECT coalesce(a.balance - a.held, 0)::bigint AS available,
          coalesce((SELECT max(e.id) FROM credit_entries e WHERE e.wallet = ${wallet} AND e.kind IN ('topup', 'release', 'refund')), 0)::bigint AS entry
        FROM (SELECT 1) AS one LEFT JOIN credit_accounts a ON a.wallet = ${wallet}`
      return row!
    },

    /** Accounts whose balance or held differs from the sum of their entries (the amounts as text, for the log). */
    drift() {
      return db.$queryRaw<Array<{ wallet: string; balance: string; held: string; entriesBalance: string; entriesHeld: string }>>`
        SELECT coalesce(a.wallet, e.wallet) AS wallet, coalesce(a.balance, 0)::text AS balance, coalesce(a.held, 0)::text AS held,
          coalesce(e.balance, 0)::bigint::text AS "entriesBalance", coalesce(e.held, 0)::bigint::text AS "entriesHeld"
        FROM credit_accounts a
        FULL JOIN (
          SELECT wallet,
            sum(CASE WHEN kind IN ('topup', 'refund') THEN amount WHEN kind IN ('debit', 'capture', 'withdraw') THEN -amount ELSE 0 END) AS balance,
            sum(CASE WHEN kind = 'hold' THEN amount WHEN kind IN ('capture', 'release') THEN -amount ELSE 0 END) AS held
          FROM credit_entries GROUP BY wallet) e ON e.wallet = a.wallet
        WHERE coalesce(a.balance, 0) <> coalesce(e.balance, 0) OR coalesce(a.held, 0) <> coalesce(e.held, 0)`
    },
  }
}

export type CreditLedger = ReturnType<typeof createCreditLedger>
