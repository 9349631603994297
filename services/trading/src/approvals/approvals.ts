// The approvals of swaps held for a person's decision: how they are written, read and shown.
import { randomBytes } from 'node:crypto'
import type { Approval as ApprovalView, SwapResult } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import type { Approval, ApprovalStatus, Prisma, PrismaClient } from '../generated/prisma/client.ts'
import { requesterColumns, type Caller } from '../swaps/executions.ts'
import type { SwapRequest } from '../swaps/executor.ts'
import type { SpendLimits } from '../swaps/policy.ts'
import { impactOf, type RoutedQuote } from '../swaps/quotes.ts'
import { formatUsd } from '../swaps/usd.ts'

export type { Approval as ApprovalRow } from '../generated/prisma/client.ts'

const newId = () => `apr_${randomBytes(12).toString('base64url')}`

/** The swap as asked, kept to run it on approval. */
interface StoredRequest {
  tokenIn: string
  tokenOut: string
  amountIn: string
  dex: string
  slippageBps: number
  recipient: string | null
  /** the user's wallet a swap under its grant spends (absent: the server wallet) */
  from?: string
}

interface StoredQuote {
  amountOut: string
  amountOutMinimum: string
  priceImpactBps: number
  blockNumber: string
}

/** "15 minutes", "1.5 seconds": how long an approval waits, as its expiry says it. */
export function durationOf(ms: number): string {
  const [amount, unit] = ms % 60_000 === 0 ? [ms / 60_000, 'minute'] : [ms / 1000, 'second']
  return `${amount} ${unit}${amount === 1 ? '' : 's'}`
}

/** The error of an approval abandoned because nobody decided it in time. */
export const expiryMessage = (ttlMs: number) => `abandoned: not approved within ${durationOf(ttlMs)} (APPROVAL_TTL_MS)`

/** The error of an approval abandoned at the payment deadline of the paid agent job that asked. */
export const paymentExpiryMessage = (deadline: Date) =>
  `abandoned: not decided by ${deadline.toISOString()}, after which the payment of the agent job that asked could no longer be settled`

/**
 * An approval as the API shows it. `publicUrl` (TRADING_PUBLIC_URL, the gateway as people reach
 * it) makes its console link absolute, so that it opens from a webhook receiver or a chat; unset,
 * the link is a path on the gateway like the others.
 */
export function approvalView(row: Approval, publicUrl = ''): ApprovalView {
  const request = row.request as unknown as StoredRequest
  const quote = row.quote as unknown as StoredQuote
  const self = `/approvals/${row.id}`
  return {
    id: row.id,
    status: row.status,
    reason: row.reason,
    swap: { ...request, tokenInAddress: row.tokenIn, tokenOutAddress: row.tokenOut },
    quote: { ...quote, usdValue: row.usdValue },
    policy: { owner: row.policyOwner, approvalAboveUsd: row.approvalAboveUsd, approvers: row.approvers, selfApprove: row.selfApprove },
    requestedBy: { keyId: row.keyId, ownerId: row.ownerId, jobId: row.jobId, automationRunId: row.automationRunId },
    createdAt: row.createdAt.getTime(),
    expiresAt: row.expiresAt.getTime(),
    expiresWithPayment: row.paymentDeadline !== null,
    decidedAt: row.decidedAt?.getTime() ?? null,
    decidedBy: row.decidedBy,
    decisionReason: row.decisionReason,
    result: (row.result as SwapResult | null) ?? null,
    error: row.error,
    links: {
      self,
      approve: `${self}/approve`,
      reject: `${self}/reject`,
      console: `${publicUrl.replace(/\/+$/, '')}/console/#/approvals/${row.id}`,
    },
  }
}

/** The request an approved approval runs again (with a fresh quote). */
export function requestOf(row: Approval): SwapRequest {
  const { tokenIn, tokenOut, amountIn, dex, slippageBps, recipient, from } = row.request as unknown as StoredRequest
  return {
    tokenIn,
    tokenOut,
    amountIn,
    dex: dex as SwapRequest['dex'],
    slippageBps,
    ...(recipient ? { recipient } : {}),
    ...(from ? { from } : {}),
  }
}

/** Who asked, as the executor takes it: the approved swap runs for them, under their spend policy. */
export const callerOfApproval = (row: Approval): Caller => ({
  keyId: row.keyId ?? undefined,
  ownerId: row.ownerId ?? undefined,
  jobId: row.jobId ?? undefined,
  automationRunId: row.automationRunId ?? undefined,
})

export interface HoldRequest {
  request: SwapRequest
  caller: Caller
  /** the payer (lower case) of a swap made for a payer */
  payer: string | undefined
  idem: { scope: string; key: string } | undefined
  quote: RoutedQuote
  minOut: bigint
  usdValue: number | undefined
  asking: SpendLimits & { approvalAboveUsd: number }
}

function reasonOf(usdValue: number | undefined, asking: HoldRequest['asking']): string {
  const threshold = `the approval threshold of ${formatUsd(asking.approvalAboveUsd)} set by the spend policy of ${asking.owner}`
  return usdValue === undefined
    ? `this swap has no trusted USD price, and ${threshold} holds such swaps for approval`
    : `this swap is worth ${formatUsd(usdValue)}, over ${threshold}`
}

export interface ApprovalStoreOptions {
  db: PrismaClient
  ttlMs: number
  log: Logger
  /** TRADING_PUBLIC_URL: put before the console links of the views (approvalView) */
  publicUrl?: string
  now?: () => number
}

/** Approvals in `trading.approvals`: held by the executor, decided by people (decisions.ts), expired by time. */
export function createApprovalStore({ db, ttlMs, log, publicUrl = '', now = Date.now }: ApprovalStoreOptions) {
  /** Pending approvals past their expiry become expired (nothing was sent); `id` narrows it to one. */
  async function expireDue(id?: string): Promise<string[]> {
    const due = await db.approval.findMany({
      where: { ...(id ? { id } : {}), status: 'pending', expiresAt: { lte: new Date(now()) } },
      select: { id: true, createdAt: true, expiresAt: true, paymentDeadline: true },
      take: 100,
    })
    const expired: string[] = []
    for (const row of due) {
      // the time it was given (a replica with another APPROVAL_TTL_MS may be the one to expire it)
      const error = row.paymentDeadline
        ? paymentExpiryMessage(row.paymentDeadline)
        : expiryMessage(row.expiresAt.getTime() - row.createdAt.getTime())
      const { count } = await db.approval.updateMany({
        where: { id: row.id, status: 'pending' },
        data: { status: 'expired', decidedAt: new Date(now()), error },
      })
      if (count) {
        expired.push(row.id)
        log.info({ approvalId: row.id, status: 'expired' }, 'approval expired; nothing was sent')
      }
    }
    return expired
  }

  return {
    expireDue,

    /**
     * Records a swap held for approval; nothing is sent. It waits APPROVAL_TTL_MS, or less when the
     * paid job that asked must end sooner (`caller.decideBy`, its payment's deadline).
     */
    async hold({ request, caller, payer, idem, quote, minOut, usdValue, asking }: HoldRequest): Promise<ApprovalView> {
      const stored: StoredRequest = {
        tokenIn: request.tokenIn,
        tokenOut: request.tokenOut,
        amountIn: request.amountIn,
        dex: quote.dex.name,
        slippageBps: request.slippageBps ?? 50,
        recipient: request.recipient ?? null,
        ...(request.from ? { from: request.from } : {}),
      }
      const quoted: StoredQuote = {
        amountOut: quote.amountOut.toString(),
        amountOutMinimum: minOut.toString(),
        priceImpactBps: impactOf(quote),
        blockNumber: quote.blockNumber.toString(),
      }
      const at = now()
      const capped = caller.decideBy !== undefined && caller.decideBy < at + ttlMs ? Math.max(at, caller.decideBy) : undefined
      const row = await db.approval.create({
        data: {
          id: newId(),
          ...requesterColumns(caller, payer, idem),
          request: stored as unknown as Prisma.InputJsonValue,
          tokenIn: quote.tokenIn.address,
          tokenOut: quote.tokenOut.address,
          quote: quoted as unknown as Prisma.InputJsonValue,
          usdValue: usdValue ?? null,
          policyOwner: asking.owner,
          approvalAboveUsd: asking.approvalAboveUsd,
          approvers: asking.approvers ?? [],
          selfApprove: asking.selfApprove ?? false,
          reason: reasonOf(usdValue, asking),
          createdAt: new Date(at),
          expiresAt: new Date(capped ?? at + ttlMs),
          paymentDeadline: capped === undefined ? null : new Date(capped),
        },
      })
      return approvalView(row, publicUrl)
    },

    /** An approval as the API shows it, its console link under TRADING_PUBLIC_URL. */
    view(row: Approval): ApprovalView {
      return approvalView(row, publicUrl)
    },

    /** One approval, expired first when its time ran out. */
    async find(id: string): Promise<Approval | null> {
      await expireDue(id)
      return db.approval.findUnique({ where: { id } })
    },

    /**
     * Newest first: `owners` null for every approval (an admin key), else those the key asked for,
     * those whose policy names it as an approver, and those of the payer of its bound wallet.
     */
    async list(
      owners: { keyId?: string | undefined; wallet?: string | undefined } | null,
      status: ApprovalStatus | undefined,
      limit: number,
    ) {
      await expireDue()
      const keyId = owners?.keyId ?? '-'
      const whose =
        owners === null
          ? []
          : [{ keyId }, { approvers: { has: keyId } }, ...(owners.wallet ? [{ keyId: null, ownerId: owners.wallet.toLowerCase() }] : [])]
      return db.approval.findMany({
        where: { ...(status ? { status } : {}), ...(owners === null ? {} : { OR: whose }) },
        orderBy: { createdAt: 'desc' },
        take: limit,
      })
    },
  }
}

export type ApprovalStore = ReturnType<typeof createApprovalStore>
