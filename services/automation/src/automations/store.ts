// Automations and their runs in Postgres (schema "automation"), and the claim that hands due
// work to exactly one scheduler however many run: FOR UPDATE SKIP LOCKED, with the next due
// time moved in the same transaction.
import { randomBytes } from 'node:crypto'
import type { Automation as AutomationView, AutomationRun as RunView, AutomationStatus, RunTrigger, SwapResult } from '@ats/contracts'
import { BadRequest, recordEvent, type CounterMetric, type EventOutbox, type EventToRecord, type ServiceMetrics } from '@ats/service-kit'
import { AutomationLimit } from '../errors.ts'
import type { Automation, AutomationRun, Prisma, PrismaClient } from '../generated/prisma/client.ts'
import { afterSlice, firedReason, nextSlice, overReason, twapStartedAt, type TwapState } from './orders.ts'
import { firstRunAt, isTrigger, nextRunAt, resumeRunAt, type Config, type RecurringBuy, type StopOrder, type Twap } from './types.ts'

/** The statuses that count toward AUTOMATION_MAX_PER_KEY: what runs, or may run again at a PATCH. */
const counted = ['active', 'paused'] as const
const isCounted = (status: string) => (counted as readonly string[]).includes(status)

const newId = (prefix: string) => `${prefix}_${randomBytes(12).toString('base64url')}`

/** Who an automation belongs to: an API key, or the payer of an agent job. */
export interface Owner {
  ownerId: string
  keyId?: string | undefined
}

/** The identity a run trades as: the automation's API key (its spend policy), or its payer. */
export const identityOf = (automation: Automation) =>
  automation.keyId ? { ownerId: automation.keyId, keyId: automation.keyId } : { ownerId: automation.ownerId }

export function automationView(row: Automation): AutomationView {
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    status: row.status,
    walletAddress: row.walletAddress,
    source: row.source as AutomationView['source'],
    config: row.config as Record<string, unknown>,
    createdAt: row.createdAt.getTime(),
    updatedAt: row.updatedAt.getTime(),
    nextRunAt: row.status === 'active' && row.nextRunAt ? row.nextRunAt.getTime() : null,
    runs: row.runs,
    statusReason: row.statusReason,
    state: (row.state as Record<string, unknown> | null) ?? null,
  }
}

export function runView(row: AutomationRun): RunView {
  return {
    id: row.id,
    automationId: row.automationId,
    scheduledFor: row.scheduledFor.getTime(),
    startedAt: row.startedAt.getTime(),
    finishedAt: row.finishedAt?.getTime() ?? null,
    status: row.status,
    txHash: row.txHash,
    amountIn: row.amountIn,
    amountOut: row.amountOut,
    executionId: row.executionId,
    error: row.error,
    trigger: (row.trigger as RunTrigger | null) ?? null,
    approval:
      row.approvalId && row.approvalExpiresAt
        ? { id: row.approvalId, url: `/approvals/${row.approvalId}`, expiresAt: row.approvalExpiresAt.getTime() }
        : null,
  }
}

/** The statuses of a run that holds its automation: no other run of it starts meanwhile. */
const underWay = ['running', 'awaiting_approval'] as const

/** How many runs of an automation started: under way, or swapped. */
const startedRuns = (t: Prisma.TransactionClient, automationId: string) =>
  t.automationRun.count({ where: { automationId, status: { in: [...underWay, 'success'] } } })

/** Leases the runs `rows` locked (`data`: until when, and whether it is another attempt); with their automation. */
async function leaseRuns(t: Prisma.TransactionClient, rows: Array<{ id: string }>, data: Prisma.AutomationRunUpdateManyMutationInput) {
  if (rows.length === 0) return []
  const ids = rows.map((r) => r.id)
  await t.automationRun.updateMany({ where: { id: { in: ids } }, data })
  return t.automationRun.findMany({ where: { id: { in: ids } }, include: { automation: true } })
}

/** A new run of an automation, held by the scheduler that made it until `leaseUntil`. */
const createRun = (
  t: Prisma.TransactionClient,
  automation: Automation,
  run: { scheduledFor: Date; amountIn: string; leaseUntil: Date; trigger?: RunTrigger | undefined },
) => t.automationRun.create({ data: { id: newId('run'), automationId: automation.id, ...run } })

/** How a run ended, as /metrics counts it: swapped, failed, or skipped (not made). */
const endedStatuses = ['success', 'failed', 'skipped'] as const
export type RunCounter = CounterMetric<{ status: typeof endedStatuses }>
export const runCounter = (metrics: ServiceMetrics): RunCounter =>
  metrics.counter({
    name: 'ats_automation_runs_total',
    help: 'automation runs recorded, by how they ended (skipped: not made, the wallet paused or the approval refused)',
    labels: { status: endedStatuses },
  })

/** How a run ended: what finishRun records. */
export type RunOutcome =
  | { ok: true; txHash: string; amountOut: string; executionId: string }
  | { ok: false; error: string; txHash?: string | undefined; executionId?: string | undefined }

/** A swap trading made, as its run's outcome: mined, or reverted on chain (`reverted` says so). */
export const swapOutcome = (result: SwapResult, reverted: string): RunOutcome =>
  result.success
    ? { ok: true, txHash: result.hash, amountOut: result.amountOut, executionId: result.executionId }
    : { ok: false, error: reverted, txHash: result.hash, executionId: result.executionId }

/**
 * Whose webhook subscriptions hear of an automation: its key (and the wallet it buys for), or,
 * for an agent payer's automation, the payer.
 */
const eventOwner = (automation: Automation): EventToRecord['owner'] =>
  automation.keyId ? { keyId: automation.keyId, wallet: automation.walletAddress } : { wallet: automation.ownerId }

const completedEvent = (automation: Automation, statusReason: string): EventToRecord => ({
  type: 'automation.completed',
  owner: eventOwner(automation),
  data: { automationId: automation.id, status: 'completed', statusReason },
})

const runEvent = (automation: Automation, run: Pick<AutomationRun, 'id' | 'status' | 'txHash' | 'error'>): EventToRecord => ({
  type: run.status === 'success' ? 'automation.run.succeeded' : 'automation.run.failed',
  owner: eventOwner(automation),
  data: {
    automationId: automation.id,
    runId: run.id,
    status: run.status,
    ...(run.txHash ? { txHash: run.txHash } : {}),
    ...(run.error ? { error: run.error } : {}),
  },
})

/** Work a scheduler claimed: a run to execute (new or resumed), or a limit order's or stop order's price check. */
export type Claimed =
  | { kind: 'run'; run: AutomationRun; automation: Automation }
  | { kind: 'check'; automation: Automation; scheduledFor: Date }

export interface StoreOptions {
  maxPerOwner: number
  /** how often a stop order's price is checked (AUTOMATION_TRIGGER_CHECK_MS) */
  triggerCheckMs: number
  events: Pick<EventOutbox, 'send'>
  runsCounted: RunCounter
}

/** A TWAP run's slice ended (swapped or not): the TWAP's state moved on, and why it is over when that was its last. */
async function sliceEnded(t: Prisma.TransactionClient, automation: Automation, amountIn: string, swapped: boolean, now: number) {
  const state = afterSlice(automation.config as unknown as Twap, automation.state as unknown as TwapState, amountIn, swapped)
  const over = overReason({ ...automation, state }, now)
  await t.automation.update({ where: { id: automation.id }, data: { state: state as object } })
  return over
}

export function createStore(db: PrismaClient, { maxPerOwner, triggerCheckMs, events, runsCounted }: StoreOptions) {
  /** Runs `work` in a transaction; the events it records are published once it commits. */
  async function withEvents<T>(
    work: (t: Prisma.TransactionClient, record: (event: EventToRecord) => Promise<void>) => Promise<T>,
  ): Promise<T> {
    const ids: string[] = []
    const result = await db.$transaction((t) => work(t, async (event) => void ids.push(await recordEvent(t, event))))
    if (ids.length > 0) events.send(...ids)
    return result
  }

  /** Completes an active automation that is over (`reason`), announcing it; nothing without a reason. */
  async function complete(
    t: Prisma.TransactionClient,
    record: (event: EventToRecord) => Promise<void>,
    automation: Automation,
    reason: string | undefined,
  ) {
    if (reason === undefined) return
    const { count } = await t.automation.updateMany({
      where: { id: automation.id, status: 'active' },
      data: { status: 'completed', nextRunAt: null, statusReason: reason },
    })
    if (count > 0) await record(completedEvent(automation, reason))
  }

  /**
   * Refuses (409) one more counted automation for the owner. Under a per-owner lock held to the end
   * of the transaction, so concurrent creates count each other.
   */
  async function checkRoom(t: Prisma.TransactionClient, owner: Owner) {
    await t.$queryRaw`SELECT pg_advisory_xact_lock(hashtext(${`ats:automation:owner:${owner.ownerId}`}))::text`
    const open = await t.automation.count({ where: { ownerId: owner.ownerId, status: { in: [...counted] } } })
    if (open >= maxPerOwner) {
      throw new AutomationLimit(
        `this ${owner.keyId ? 'key' : 'payer'} has ${open} active or paused automations, its limit (AUTOMATION_MAX_PER_KEY = ${maxPerOwner}): delete one, or set one completed, first`,
      )
    }
  }

  return {
    async create(
      owner: Owner,
      input: {
        walletAddress: string
        source: AutomationView['source']
        type: string
        name: string
        config: Config
        state?: object | undefined
      },
      now = Date.now(),
    ) {
      return db.$transaction(async (t) => {
        await checkRoom(t, owner)
        return t.automation.create({
          data: {
            id: newId('aut'),
            ownerId: owner.ownerId,
            keyId: owner.keyId ?? null,
            walletAddress: input.walletAddress,
            source: input.source,
            type: input.type,
            name: input.name,
            config: input.config as object,
            ...(input.state ? { state: input.state } : {}),
            // a TWAP's slice 1 at its start, which every later slice keeps its phase from
            nextRunAt: new Date(
              input.type === 'twap' && input.state
                ? twapStartedAt(input.config as Twap, input.state as unknown as TwapState)
                : firstRunAt(input.config, now, triggerCheckMs),
            ),
          },
        })
      })
    },

    list: (owner: Owner, wallet?: string) =>
      db.automation.findMany({
        where: { ownerId: owner.ownerId, ...(wallet ? { walletAddress: { equals: wallet, mode: 'insensitive' as const } } : {}) },
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
        take: 500,
      }),

    get: (owner: Owner, id: string) => db.automation.findFirst({ where: { id, ownerId: owner.ownerId } }),

    /**
     * Sets the status. A pause keeps the due time; resuming makes it due at its next scheduled time
     * after now (resumeRunAt), never at once, so pause and resume cannot run it more often than its
     * schedule. Completed or failed back to active or paused counts toward the limit again.
     */
    async setStatus(owner: Owner, id: string, status: AutomationStatus, now = Date.now()) {
      return withEvents(async (t, record) => {
        const row = await t.automation.findFirst({ where: { id, ownerId: owner.ownerId } })
        if (!row) return null
        if (row.status === status) return row
        const resumed = status === 'active'
        const over = resumed ? overReason(row, now) : undefined
        if (over) throw new BadRequest(`automation ${id} cannot be resumed: ${over}`)
        if (isCounted(status) && !isCounted(row.status)) await checkRoom(t, owner)
        const nextRunAt = resumed
          ? new Date(resumeRunAt(row.config as unknown as Config, row.nextRunAt?.getTime() ?? null, now, triggerCheckMs))
          : status === 'paused'
            ? row.nextRunAt
            : null
        const updated = await t.automation.update({
          where: { id },
          data: {
            status,
            nextRunAt,
            ...(resumed
              ? { failures: 0, statusReason: null }
              : { statusReason: status === 'paused' ? null : `set to ${status} by its owner` }),
          },
        })
        if (status === 'completed') await record(completedEvent(updated, updated.statusReason!))
        return updated
      })
    },

    /** Pauses an automation its owner did not pause (its grant was revoked or expired), saying why. */
    pauseFor: (automationId: string, reason: string) =>
      db.automation.updateMany({ where: { id: automationId, status: 'active' }, data: { status: 'paused', statusReason: reason } }),

    /** The approvals this automation's runs wait for (withdrawn before it is deleted). */
    waitingApprovals: async (automationId: string) =>
      (await db.automationRun.findMany({ where: { automationId, status: 'awaiting_approval' }, select: { approvalId: true } })).flatMap(
        (r) => (r.approvalId ? [r.approvalId] : []),
      ),

    async remove(owner: Owner, id: string) {
      const { count } = await db.automation.deleteMany({ where: { id, ownerId: owner.ownerId } })
      return count > 0
    },

    runs: (automationId: string, limit: number) =>
      db.automationRun.findMany({ where: { automationId }, orderBy: [{ scheduledFor: 'desc' }, { id: 'desc' }], take: limit }),

    /**
     * Takes up to `limit` pieces of due work for one scheduler: automations whose time has come
     * (locked with SKIP LOCKED, so concurrent schedulers take different rows, and moved to their
     * next due time before the lock is released) and runs whose scheduler died (lease expired).
     */
    async claim(limit: number, leaseMs: number, now = Date.now()): Promise<Claimed[]> {
      return withEvents(async (t, record) => {
        const claimed: Claimed[] = []
        const lease = new Date(now + leaseMs)
        // never two runs of one automation at once: a run still under way (slower than the
        // interval, or waiting for approval) holds the next until it ends; the next is then due
        // at once, not skipped
        const locked = await t.$queryRaw<Array<{ id: string }>>`
          SELECT a.id FROM automations a WHERE a.status = 'active' AND a.next_run_at <= ${new Date(now)}
            AND NOT EXISTS (SELECT 1 FROM automation_runs r WHERE r.automation_id = a.id AND r.status IN ('running', 'awaiting_approval'))
          ORDER BY a.next_run_at LIMIT ${limit} FOR UPDATE OF a SKIP LOCKED`
        const due = await t.automation.findMany({ where: { id: { in: locked.map((r) => r.id) } }, orderBy: { nextRunAt: 'asc' } })
        for (const automation of due) {
          const { id } = automation
          const config = automation.config as unknown as Config
          const scheduledFor = automation.nextRunAt!
          // only what time ends (a run that ends it completes it there)
          const over = overReason({ ...automation, runs: 0 }, now)
          if (over) {
            await complete(t, record, automation, over)
            continue
          }
          if (automation.type === 'limit-order' || isTrigger(automation.type)) {
            // a price check; the order is held (next_run_at = the lease) until the check says what next
            await t.automation.update({ where: { id }, data: { nextRunAt: lease } })
            claimed.push({ kind: 'check', automation, scheduledFor })
            continue
          }
          if (automation.type === 'twap') {
            const [order, state] = [config as Twap, automation.state as unknown as TwapState]
            const slice = nextSlice(order, state)
            // slice k is due at the TWAP's start + (k - 1) slices: a late slice does not push the later ones out of the window
            const start = twapStartedAt(order, state)
            await t.automation.update({ where: { id }, data: { nextRunAt: new Date(start + slice.trigger.slice! * order.sliceMs) } })
            claimed.push({ kind: 'run', run: await createRun(t, automation, { scheduledFor, leaseUntil: lease, ...slice }), automation })
            continue
          }
          await t.automation.update({ where: { id }, data: { nextRunAt: new Date(nextRunAt(config, now, triggerCheckMs)) } })
          const recurring = config as RecurringBuy
          // the last runs are still under way: they complete it
          if (recurring.maxRuns !== undefined && (await startedRuns(t, id)) >= recurring.maxRuns) continue
          const run = await createRun(t, automation, { scheduledFor, leaseUntil: lease, amountIn: recurring.amount })
          claimed.push({ kind: 'run', run, automation })
        }
        const stale = await t.$queryRaw<Array<{ id: string }>>`
          SELECT id FROM automation_runs WHERE status = 'running' AND lease_until < ${new Date(now)}
          ORDER BY lease_until LIMIT ${limit} FOR UPDATE SKIP LOCKED`
        for (const { automation, ...run } of await leaseRuns(t, stale, { leaseUntil: lease, attempts: { increment: 1 } })) {
          claimed.push({ kind: 'run', run, automation })
        }
        return claimed
      })
    },

    /**
     * A limit order's check found its price, or a stop order's a level crossed (`trigger`): the one
     * run of the order, unless one exists already (a fill never happens twice); null when it does.
     */
    async startFill(automation: Automation, scheduledFor: Date, leaseMs: number, trigger?: RunTrigger, now = Date.now()) {
      return db.$transaction(async (t) => {
        const rows = await t.$queryRaw<Array<{ id: string }>>`
          SELECT id FROM automations WHERE id = ${automation.id} AND status = 'active' FOR UPDATE`
        if (rows.length === 0 || (await startedRuns(t, automation.id)) > 0) return null
        const amountIn = (automation.config as unknown as Config).amount
        return createRun(t, automation, { scheduledFor, leaseUntil: new Date(now + leaseMs), amountIn, trigger })
      })
    },

    /** A limit order's or stop order's check did not fill: note what it saw (a stop order's state too) and when it checks again. */
    async checked(automation: Automation, reason: string, state?: object, now = Date.now()) {
      await db.automation.updateMany({
        where: { id: automation.id, status: 'active' },
        data: {
          nextRunAt: new Date(nextRunAt(automation.config as unknown as Config, now, triggerCheckMs)),
          statusReason: reason,
          ...(state ? { state } : {}),
        },
      })
    },

    /**
     * trading holds the run's swap for a person's approval: the run waits (awaiting_approval) and
     * the approval watch asks after it from `checkAt`. False when the run is gone (its automation
     * was deleted meanwhile): nobody waits for the approval then.
     */
    async awaitApproval(run: AutomationRun, approval: { id: string; expiresAt: number }, checkAt: number) {
      await db.automationRun.updateMany({
        where: { id: run.id, status: 'running' },
        data: {
          status: 'awaiting_approval',
          approvalId: approval.id,
          approvalExpiresAt: new Date(approval.expiresAt),
          leaseUntil: new Date(checkAt),
        },
      })
      // not running any more: a resumed copy of the run recorded the wait first (fine), or the run is gone
      return (await db.automationRun.count({ where: { id: run.id } })) > 0
    },

    /**
     * Takes up to `limit` waiting runs whose check is due for one replica (SKIP LOCKED; held for
     * `holdMs` meanwhile, so replicas do not ask about the same run at once), with their automation.
     */
    async claimWaiting(limit: number, holdMs: number, now = Date.now()) {
      return db.$transaction(async (t) => {
        const rows = await t.$queryRaw<Array<{ id: string }>>`
          SELECT id FROM automation_runs WHERE status = 'awaiting_approval' AND (lease_until IS NULL OR lease_until <= ${new Date(now)})
          ORDER BY lease_until NULLS FIRST LIMIT ${limit} FOR UPDATE SKIP LOCKED`
        return leaseRuns(t, rows, { leaseUntil: new Date(now + holdMs) })
      })
    },

    /** A waiting run's approval is still undecided: ask again from `checkAt`. */
    stillWaiting: (run: AutomationRun, checkAt: number) =>
      db.automationRun.updateMany({ where: { id: run.id, status: 'awaiting_approval' }, data: { leaseUntil: new Date(checkAt) } }),

    /**
     * A run not made, counting neither as a run nor as a failure: the server wallet was paused, its
     * approval was rejected, expired or withdrawn, or a TWAP slice was over its price-impact limit
     * (the slice ends: its amount carried on or dropped). From running or awaiting_approval only,
     * so a repeat is harmless.
     */
    async skipRun(run: AutomationRun, reason: string, now = Date.now()) {
      const skipped = await withEvents(async (t, record) => {
        const { count } = await t.automationRun.updateMany({
          where: { id: run.id, status: { in: [...underWay] } },
          data: { status: 'skipped', error: reason, finishedAt: new Date(), leaseUntil: null },
        })
        if (count === 0) return false
        const automation = await t.automation.findUnique({ where: { id: run.automationId } })
        if (!automation) return true
        await record(runEvent(automation, { id: run.id, status: 'skipped', txHash: null, error: reason }))
        if (automation.type === 'twap') await complete(t, record, automation, await sliceEnded(t, automation, run.amountIn, false, now))
        return true
      })
      if (skipped) runsCounted.inc({ status: 'skipped' })
    },

    /**
     * A run's swap was mined (or reverted, or could not be made): record it; count it, and
     * complete the automation when it is done. From running or awaiting_approval only, so a
     * repeat (two replicas, a resumed run) changes nothing.
     */
    async finishRun(run: AutomationRun, outcome: RunOutcome, maxFailures: number, now = Date.now()) {
      const recorded = await withEvents(async (t, record) => {
        const data = outcome.ok
          ? {
              status: 'success' as const,
              txHash: outcome.txHash,
              amountOut: outcome.amountOut,
              executionId: outcome.executionId,
              error: null,
            }
          : { status: 'failed' as const, error: outcome.error, txHash: outcome.txHash ?? null, executionId: outcome.executionId ?? null }
        const updated = await t.automationRun.updateMany({
          where: { id: run.id, status: { in: [...underWay] } },
          data: { ...data, finishedAt: new Date(), leaseUntil: null },
        })
        if (updated.count === 0) return false
        const automation = await t.automation.findUnique({ where: { id: run.automationId } })
        if (!automation) return true
        await record(runEvent(automation, { id: run.id, ...data }))
        const twapOver = automation.type === 'twap' ? await sliceEnded(t, automation, run.amountIn, outcome.ok, now) : undefined
        if (outcome.ok) {
          const runs = automation.runs + 1
          const trigger = run.trigger as RunTrigger | null
          const over =
            isTrigger(automation.type) && trigger
              ? firedReason(automation.config as unknown as StopOrder, trigger)
              : (twapOver ?? overReason({ ...automation, runs }, now))
          await t.automation.update({ where: { id: automation.id }, data: { runs, failures: 0 } })
          await complete(t, record, automation, over)
          return true
        }
        if (twapOver) {
          await complete(t, record, automation, twapOver)
          return true
        }
        const failures = automation.failures + 1
        const failed = failures >= maxFailures && automation.status === 'active'
        await t.automation.update({
          where: { id: automation.id },
          data: {
            failures,
            ...(failed
              ? { status: 'failed', nextRunAt: null, statusReason: `${failures} runs in a row failed; the last: ${outcome.error}` }
              : {}),
          },
        })
        return true
      })
      if (recorded) runsCounted.inc({ status: outcome.ok ? 'success' : 'failed' })
    },
  }
}
export type Store = ReturnType<typeof createStore>
