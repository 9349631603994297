// The executions of swaps in Postgres (schema "trading"): each row from pending to mined, who asked for it, and how it is shown.
import { randomBytes } from 'node:crypto'
import type { Execution as ExecutionView, SwapResult } from '@ats/contracts'
import type { SignedTx } from '@ats/chain'
import { recordEvent, type EventOutbox } from '@ats/service-kit'
import { getAddress, type Hex } from 'viem'
import type { Execution, Prisma, PrismaClient } from '../generated/prisma/client.ts'
import { lockSpends, spentToday, startOfUtcDay, type SpendOwner } from '../spend.ts'
import { routeOf, type RoutedQuote } from './quotes.ts'

const newId = () => `exe_${randomBytes(12).toString('base64url')}`

/** Who asked for a swap: the API key (its spend policy applies), and the job or automation run behind it. */
export interface Caller {
  keyId?: string | undefined
  ownerId?: string | undefined
  jobId?: string | undefined
  automationRunId?: string | undefined
  /** ms since the epoch: a paid job's payment deadline, past which its approval cannot wait */
  decideBy?: number | undefined
}

/** The idempotency key of an execute, with the scope (the caller) it belongs to. */
export type IdempotencyRef = { scope: string; key: string }

/** Who asked, as an execution or approval row keeps it (a payer lower-case), with the idempotency key of the execute. */
export const requesterColumns = (caller: Caller, payer: string | undefined, idem: IdempotencyRef | undefined) => ({
  keyId: caller.keyId ?? null,
  ownerId: payer ?? caller.ownerId ?? null,
  jobId: caller.jobId ?? null,
  automationRunId: caller.automationRunId ?? null,
  idempotencyScope: idem?.scope ?? null,
  idempotencyKey: idem?.key ?? null,
})

export function executionView(row: Execution): ExecutionView {
  return {
    id: row.id,
    status: row.status,
    dex: row.dex as ExecutionView['dex'],
    tokenIn: row.route[0] ?? row.tokenIn,
    tokenOut: row.route[row.route.length - 1] ?? row.tokenOut,
    amountIn: row.amountIn,
    quotedAmountOut: row.quotedAmountOut,
    amountOutMinimum: row.amountOutMinimum,
    amountOut: row.amountOut,
    usdValue: row.usdValue,
    hash: row.txHash,
    error: row.error,
    requestedBy: { keyId: row.keyId, jobId: row.jobId, automationRunId: row.automationRunId },
    createdAt: row.createdAt.getTime(),
    updatedAt: row.updatedAt.getTime(),
  }
}

/** A mined execution as execute answers it. */
export function swapResultOf(row: Execution): SwapResult {
  return {
    success: row.status === 'success',
    hash: row.txHash as Hex,
    dex: row.dex as SwapResult['dex'],
    tokenIn: row.route[0]!,
    tokenOut: row.route[row.route.length - 1]!,
    amountIn: row.amountIn,
    amountOut: row.amountOut ?? '0',
    amountOutMinimum: row.amountOutMinimum,
    route: row.route,
    blockNumber: String(row.blockNumber ?? 0n),
    executionId: row.id,
    ...(row.grantId ? { from: row.recipient as Hex, grantId: row.grantId as Hex } : {}),
  }
}

/** USD an owner spent today (UTC): swaps and launches, read in the transaction that asks. */
export type SpentToday = (owner: SpendOwner) => Promise<number>

/** A swap about to be sent: its quote, bounds and value, and who asked. */
export interface NewExecution {
  quote: RoutedQuote
  minOut: bigint
  usdValue: number | undefined
  recipient: string | undefined
  /** the grant of a swap from the recipient's own wallet */
  grantId?: string | undefined
  slippageBps: number
  caller: Caller
  payer: string | undefined
  idem: IdempotencyRef | undefined
}

/** The store of executions; `events` publishes the swap.confirmed events written with a mined swap. */
export function createExecutionStore(db: PrismaClient, events: Pick<EventOutbox, 'send'>, now = Date.now) {
  function spentIn(t: Prisma.TransactionClient): SpentToday {
    return (owner) => spentToday(t, owner, startOfUtcDay(now()))
  }
  const update = (id: string, data: Prisma.ExecutionUpdateInput) => db.execution.update({ where: { id }, data })

  return {
    /** What an owner spent today, read alone: a swap held for approval reserves nothing yet. */
    spent: spentIn(db),

    /** The execution an earlier try of the same idempotency key left, if any. */
    ofIdempotencyKey: (idem: IdempotencyRef) =>
      db.execution.findUnique({ where: { idempotencyScope_idempotencyKey: { idempotencyScope: idem.scope, idempotencyKey: idem.key } } }),

    /**
     * Records the pending execution; with `check` (the caps, which throw), in one transaction under
     * the spend lock that runs it first, so concurrent swaps count each other.
     */
    reserve: (swap: NewExecution, check?: (spent: SpentToday) => Promise<void>) =>
      db.$transaction(async (t) => {
        if (check) {
          await lockSpends(t)
          await check(spentIn(t))
        }
        const { quote: q } = swap
        return t.execution.create({
          data: {
            id: newId(),
            ...requesterColumns(swap.caller, swap.payer, swap.idem),
            dex: q.dex.name,
            tokenIn: q.tokenIn.address,
            tokenOut: q.tokenOut.address,
            recipient: swap.recipient ? getAddress(swap.recipient) : null,
            grantId: swap.grantId ?? null,
            route: routeOf(q),
            amountIn: q.amountIn.toString(),
            quotedAmountOut: q.amountOut.toString(),
            amountOutMinimum: swap.minOut.toString(),
            slippageBps: swap.slippageBps,
            usdValue: swap.usdValue ?? 0,
          },
        })
      }),

    /** An execution whose transaction was dropped, pending again at a fresh quote. */
    requote: (id: string, quotedAmountOut: bigint, minOut: bigint) =>
      update(id, {
        status: 'pending',
        quotedAmountOut: quotedAmountOut.toString(),
        amountOutMinimum: minOut.toString(),
        txHash: null,
        rawTx: null,
        nonce: null,
        error: null,
      }),

    /** The gas of the token approval the swap needed, counted against the same limits. */
    approvalGas: (id: string, gasUsd: number) => update(id, { gasUsd }),

    /** Signed and about to be broadcast: the transaction is kept to look it up, or send it again. */
    async submitted(id: string, signed: SignedTx) {
      await update(id, { status: 'submitted', txHash: signed.hash, rawTx: signed.raw, nonce: signed.nonce })
    },

    /** Refused before anything was sent. */
    failed: (id: string, error: string) => update(id, { status: 'failed', error }),

    /**
     * Records the mined transaction; a success writes swap.confirmed in the same transaction (the
     * outbox), for the key and the wallet it concerns (the payer's, or the key's bound one when known).
     */
    async mined(row: Execution, mined: { success: boolean; amountOut: bigint; blockNumber: bigint }, wallet?: string): Promise<Execution> {
      const { done, eventId } = await db.$transaction(async (t) => {
        const done = await t.execution.update({
          where: { id: row.id },
          data: {
            status: mined.success ? 'success' : 'reverted',
            amountOut: mined.amountOut.toString(),
            blockNumber: mined.blockNumber,
            error: mined.success ? null : 'the swap reverted on chain',
          },
        })
        if (!mined.success) return { done }
        const result = swapResultOf(done)
        const eventId = await recordEvent(t, {
          type: 'swap.confirmed',
          owner: { keyId: done.keyId, wallet: wallet ?? (done.keyId ? undefined : done.ownerId) },
          data: {
            executionId: done.id,
            hash: done.txHash,
            tokenIn: result.tokenIn,
            tokenOut: result.tokenOut,
            amountIn: done.amountIn,
            amountOut: done.amountOut,
            usdValue: done.usdValue,
            jobId: done.jobId,
            automationRunId: done.automationRunId,
            blockNumber: String(mined.blockNumber),
          },
        })
        return { done, eventId }
      })
      if (eventId) events.send(eventId)
      return done
    },

    async list(keyId: string, limit: number) {
      const rows = await db.execution.findMany({ where: { keyId }, orderBy: { createdAt: 'desc' }, take: limit })
      return rows.map(executionView)
    },

    async get(keyId: string, id: string) {
      const row = await db.execution.findFirst({ where: { id, keyId } })
      return row ? executionView(row) : undefined
    },
  }
}

export type ExecutionStore = ReturnType<typeof createExecutionStore>
