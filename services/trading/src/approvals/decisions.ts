// Deciding approvals: who may, approving (the held swap runs once), rejecting, withdrawing, and the sweeps.
import { isAwaitingApproval, type Approval as ApprovalView, type Identity } from '@ats/contracts'
import { IdempotencyInProgress, NotFound, clientErrorStatus, startWorkerLoop, type Logger } from '@ats/service-kit'
import type { WalletControlWatch } from '@ats/wallet'
import { ApprovalDecided, SelfApproval } from '../errors.ts'
import { Prisma, type PrismaClient } from '../generated/prisma/client.ts'
import type { Executor } from '../swaps/executor.ts'
import { callerOfApproval, requestOf, type ApprovalRow, type ApprovalStore } from './approvals.ts'

/** Failures a later try may not repeat (wallet paused, rate limited, another try still running): the approval keeps waiting for its outcome. */
const transient = new Set([408, 423, 429])

/** An error that is the approved swap's outcome (refused by the policy now, would revert): recorded on the approval. */
function isOutcome(error: unknown): boolean {
  if (error instanceof IdempotencyInProgress) return false
  const status = clientErrorStatus(error)
  return status !== undefined && !transient.has(status)
}

/**
 * Someone other than the requester who may approve: a key the policy named as an approver, or,
 * for a payer's approval, a key bound to the payer's wallet.
 */
function isApprover(row: ApprovalRow, identity: Identity): boolean {
  if (identity.keyId && identity.keyId !== row.keyId && row.approvers.includes(identity.keyId)) return true
  return !row.keyId && !!row.ownerId && !!identity.wallet && row.ownerId.toLowerCase() === identity.wallet.toLowerCase()
}

/** Who sees an approval and may reject it: the key that asked, an admin-tier key, or an approver. */
function maySee(row: ApprovalRow, identity: Identity): boolean {
  return identity.tier === 'admin' || (!!row.keyId && row.keyId === identity.keyId) || isApprover(row, identity)
}

/**
 * Who may approve: never the key that asked (admin tier or not) unless its policy set
 * selfApprove, so that a person other than the requester (an agent, an MCP client) stands
 * between it and the money; an admin-tier key or an approver otherwise.
 */
function mayApprove(row: ApprovalRow, identity: Identity): boolean {
  if (row.keyId && row.keyId === identity.keyId) return row.selfApprove
  return identity.tier === 'admin' || isApprover(row, identity)
}

/** Whether an approval belongs to a requester over NATS: its key, or the payer for a payer's approval. */
export function isRequester(row: ApprovalRow, identity: Identity): boolean {
  if (row.keyId) return row.keyId === identity.keyId
  return !!row.ownerId && !!identity.ownerId && row.ownerId.toLowerCase() === identity.ownerId.toLowerCase()
}

/** The deciding key's id (admin keys have ids too), recorded as decidedBy. */
const decider = (identity: Identity) => identity.keyId ?? '-'

export interface DecisionOptions {
  db: PrismaClient
  store: ApprovalStore
  executor: Pick<Executor, 'execute'>
  walletControl: Pick<WalletControlWatch, 'assertSpendable'>
  log: Logger
  now?: () => number
}

export function createDecisions({ db, store, executor, walletControl, log, now = Date.now }: DecisionOptions) {
  async function visible(id: string, identity: Identity): Promise<ApprovalRow> {
    const row = await store.find(id)
    if (!row || !maySee(row, identity)) throw new NotFound(`approval ${id}`)
    return row
  }

  const closed = (row: ApprovalRow) =>
    new ApprovalDecided(
      row.status === 'expired'
        ? `approval ${row.id} expired: ${row.error ?? 'not approved in time'}; nothing was sent`
        : row.status === 'rejected'
          ? `approval ${row.id} was rejected${row.decidedBy ? ` by ${row.decidedBy}` : ''}${row.decisionReason ? ` (${row.decisionReason})` : ''}; nothing was sent`
          : `approval ${row.id} was already approved`,
    )

  /**
   * Runs an approved swap under the idempotency key approval:<id>: a repeat, two approvals at once
   * or the sweep after a crash all answer the same swap, sent at most once. Its outcome (the
   * result, or why it was not made) is kept on the approval; a failure a later try may get past
   * (RPC down, receipt not seen yet, wallet paused) is thrown and left for the sweep.
   */
  async function run(row: ApprovalRow): Promise<ApprovalRow> {
    if (row.result !== null || row.error !== null) return row
    let data: Prisma.ApprovalUpdateManyMutationInput
    try {
      const { result } = await executor.execute(requestOf(row), callerOfApproval(row), `approval:${row.id}`, {
        approved: true,
        via: 'approval',
      })
      if (isAwaitingApproval(result)) throw new Error('an approved swap was held for approval again')
      data = {
        result: result as unknown as Prisma.InputJsonValue,
        executionId: result.executionId,
        error: result.success ? null : 'the swap reverted on chain',
      }
    } catch (error) {
      if (!isOutcome(error)) throw error
      data = { error: (error as Error).message }
    }
    const { count } = await db.approval.updateMany({ where: { id: row.id, result: { equals: Prisma.DbNull }, error: null }, data })
    const done = (await db.approval.findUnique({ where: { id: row.id } }))!
    if (count) log.info({ approvalId: row.id, executionId: done.executionId, error: done.error }, 'approved swap done')
    return done
  }

  return {
    async get(id: string, identity: Identity): Promise<ApprovalView> {
      return store.view(await visible(id, identity))
    },

    async approve(id: string, identity: Identity): Promise<ApprovalView> {
      let row = await visible(id, identity)
      if (!mayApprove(row, identity)) throw new SelfApproval(row.keyId ?? '-')
      if (row.status === 'rejected' || row.status === 'expired') throw closed(row)
      if (row.status === 'pending') {
        walletControl.assertSpendable() // 423: it stays pending, to approve once the wallet is resumed
        const by = decider(identity)
        const { count } = await db.approval.updateMany({
          where: { id, status: 'pending', expiresAt: { gt: new Date(now()) } },
          data: { status: 'approved', decidedBy: by, decidedAt: new Date(now()) },
        })
        row = (await store.find(id))!
        if (count) log.info({ approvalId: id, decidedBy: by, status: 'approved' }, 'approval decided')
        if (row.status !== 'approved') throw closed(row)
      }
      return store.view(await run(row))
    },

    async reject(id: string, identity: Identity, reason: string | undefined): Promise<ApprovalView> {
      await visible(id, identity)
      return store.view(await close(id, decider(identity), reason ?? null, true))
    },

    /** The requester gives a pending approval up; an approval already decided is answered as it is. */
    async withdraw(id: string, identity: Identity, reason: string): Promise<ApprovalView | null> {
      const row = await store.find(id)
      if (!row || !isRequester(row, identity)) return null
      return store.view(await close(id, 'requester', reason, false))
    },

    /** The approval as its requester over NATS sees it; null when unknown or someone else's. */
    async forRequester(id: string, identity: Identity): Promise<ApprovalView | null> {
      const row = await store.find(id)
      return row && isRequester(row, identity) ? store.view(row) : null
    },

    /**
     * Expires pending approvals past their time, and runs approved ones a crash left without an
     * outcome (older than `staleMs`); every replica may: the idempotency key sends each swap once.
     */
    startSweeps({ everyMs, staleMs }: { everyMs: number; staleMs: number }) {
      return startWorkerLoop({
        name: 'approval-sweep',
        log,
        idleMs: everyMs,
        round: async () => {
          await store.expireDue()
          const stale = await db.approval.findMany({
            where: { status: 'approved', result: { equals: Prisma.DbNull }, error: null, decidedAt: { lt: new Date(now() - staleMs) } },
            take: 10,
          })
          for (const row of stale) {
            log.warn({ approvalId: row.id }, 'running an approved swap left without an outcome')
            await run(row).catch((error) => log.warn({ err: error, approvalId: row.id }, 'approved swap not done yet; will try again'))
          }
          return false
        },
      })
    },
  }

  /** pending → rejected; `strict`: 409 when it is already decided (a person), else it is answered as it is (a requester). */
  async function close(id: string, by: string, reason: string | null, strict: boolean): Promise<ApprovalRow> {
    const { count } = await db.approval.updateMany({
      where: { id, status: 'pending' },
      data: { status: 'rejected', decidedBy: by, decidedAt: new Date(now()), decisionReason: reason },
    })
    const row = (await db.approval.findUnique({ where: { id } }))!
    if (count) log.info({ approvalId: id, decidedBy: by, status: 'rejected' }, 'approval decided')
    else if (strict) throw closed(row)
    return row
  }
}

export type Decisions = ReturnType<typeof createDecisions>
