import { randomBytes } from 'node:crypto'
import { checkRecipient, erc20Abi } from '@ats/chain'
import {
  isAwaitingApproval,
  type AwaitingApproval,
  type Execution as ExecutionView,
  type SpendPolicy,
  type SwapBody,
  type SwapResult,
} from '@ats/contracts'
import {
  Forbidden,
  WalletPaused,
  clientErrorStatus,
  fingerprintOf,
  recordEvent,
  type CounterMetric,
  type EventOutbox,
  type IdempotencyStore,
  type Logger,
  type ServiceMetrics,
  type WalletControlWatch,
} from '@ats/service-kit'
import { getAddress, isAddress, parseEventLogs, type Address, type Hex, type TransactionReceipt } from 'viem'
import type { ApprovalStore } from '../approvals/approvals.ts'
import type { ChainTx } from '../chainTx.ts'
import { WouldRevert } from '../errors.ts'
import type { Execution, Prisma, PrismaClient } from '../generated/prisma/client.ts'
import { lockSpends, spentToday, startOfUtcDay } from '../spend.ts'
import { approvalAsked, checkImpact, checkSpend, limitsOfKey, limitsOfPayer, type SpendDefaults, type SpendLimits } from './policy.ts'
import type { Quoter, RoutedQuote } from './quotes.ts'
import { impactOf, routeOf } from './quotes.ts'
import type { TokenResolver } from './tokens.ts'
import { gasUsdOf, usdValueOf } from './usd.ts'

/** Who asked for a swap: the API key (its spend policy applies), and the job or automation run behind it. */
export interface Caller {
  keyId?: string | undefined
  ownerId?: string | undefined
  jobId?: string | undefined
  automationRunId?: string | undefined
  /** ms since the epoch: a paid job's payment deadline, past which its approval cannot wait */
  decideBy?: number | undefined
}

export type SwapRequest = Pick<SwapBody, 'tokenIn' | 'tokenOut' | 'amountIn'> & {
  dex?: SwapBody['dex'] | undefined
  slippageBps?: number | undefined
  /** who receives tokenOut (NATS callers: an automation's wallet); the server wallet by default */
  recipient?: string | undefined
}

export interface ExecutorOptions {
  db: PrismaClient
  quoter: Quoter
  /** the address book's tokens: swaps are valued and allowed by address, never by a token's own symbol() */
  tokens: TokenResolver
  tx: ChainTx
  idempotency: IdempotencyStore
  /** the key's spend policy (null: none) and bound wallet (null: none), asked of admin */
  keyPolicy(keyId: string): Promise<{ policy: SpendPolicy | null; wallet: string | null }>
  /** the policy of a payer on the agent's allowlist (null: not on it), asked of admin */
  payerPolicy(address: string): Promise<SpendPolicy | null>
  /** the wallet-wide limits (settings), when any is set */
  walletLimits: SpendLimits | undefined
  /** what a key or payer gets for a limit its policy leaves out */
  defaults: SpendDefaults
  /** the kill switch: nothing is sent while an admin has paused the server wallet */
  walletControl: Pick<WalletControlWatch, 'assertSpendable'>
  deadlineSeconds: number
  /** where swaps over a policy's approvalAboveUsd wait for a person */
  approvals: Pick<ApprovalStore, 'hold'>
  /** publishes the swap.confirmed events written with a mined swap */
  events: Pick<EventOutbox, 'send'>
  /** ats_swaps_total: each swap by how it ended and how it came (a replay is not counted again) */
  counted: SwapCounter
  log: Logger
  now?: () => number
}

const newId = () => `exe_${randomBytes(12).toString('base64url')}`

/**
 * How a swap's execution ended: mined (success or reverted), held for a person's approval,
 * refused before anything was sent (a client error: spend policy, price impact, would revert,
 * wallet paused), or an error of ours (RPC, admin unreachable, a receipt not seen in time: it
 * may have been sent).
 */
export const swapOutcomes = ['success', 'reverted', 'held', 'refused', 'error'] as const
/** An API request, a NATS call (the agent, automations), or a held swap run once approved. */
export const swapPaths = ['http', 'nats', 'approval'] as const
export type SwapCounter = CounterMetric<{ outcome: typeof swapOutcomes; via: typeof swapPaths }>
export type SwapPath = (typeof swapPaths)[number]
export const swapCounter = (metrics: ServiceMetrics): SwapCounter =>
  metrics.counter({
    name: 'ats_swaps_total',
    help: 'swaps from the server wallet, by how they ended and how they came (replays not counted)',
    labels: { outcome: swapOutcomes, via: swapPaths },
  })

/** Who asked, as an execution or approval row keeps it (a payer lower-case), with the idempotency key of the execute. */
export const requesterColumns = (caller: Caller, payer: string | undefined, idem: { scope: string; key: string } | undefined) => ({
  keyId: caller.keyId ?? null,
  ownerId: payer ?? caller.ownerId ?? null,
  jobId: caller.jobId ?? null,
  automationRunId: caller.automationRunId ?? null,
  idempotencyScope: idem?.scope ?? null,
  idempotencyKey: idem?.key ?? null,
})

/** A caller's limits: the payer (lower case) of a swap made for a payer, and the wallet its events concern. */
interface Limits {
  limits: SpendLimits[]
  payer?: string
  wallet?: string | undefined
}

/** The amount of `token` the receipt's Transfer logs moved to `to`. */
export function receivedFromLogs(receipt: TransactionReceipt, token: Address, to: Address): bigint {
  const transfers = parseEventLogs({ abi: erc20Abi, eventName: 'Transfer', logs: receipt.logs })
  return transfers
    .filter((log) => getAddress(log.address) === getAddress(token) && getAddress(log.args.to) === getAddress(to))
    .reduce((sum, log) => sum + log.args.value, 0n)
}

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

function resultOf(row: Execution): SwapResult {
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
  }
}

/**
 * Swaps from the server wallet: quote at the head, spend policy, approval, the router call
 * with amountOutMinimum and a deadline, the receipt. Each execution is a row of
 * `trading.executions` that moves pending → submitted (hash and signed transaction kept
 * before the broadcast) → success | reverted, or failed when nothing was sent.
 *
 * With an idempotency key the whole of it runs once per (caller, key): repeats get the first
 * result, also while it runs. A try that died half-way is resumed from its row: a signed
 * transaction is looked up or broadcast again, never signed anew unless its nonce went to
 * another transaction (then it can never be mined).
 */
export function createExecutor(options: ExecutorOptions) {
  const { db, quoter, tokens, tx, idempotency, log } = options
  const now = options.now ?? Date.now
  const find = (ref: string) => tokens.bySymbol(ref)
  const listed = (token: { address: Address }) => tokens.listed(token) !== undefined

  /**
   * Nothing spends the server wallet outside a policy: a swap is made for an API key (its policy,
   * the defaults for what it leaves out) or for a payer on the agent's allowlist (the same), never
   * for anyone else; the wallet-wide limits apply on top. A recipient other than the server wallet
   * must be the owner's own wallet or one an admin allowed it (checked here, where the money moves,
   * whoever the caller over NATS claims to be).
   */
  async function limitsFor(caller: Caller, recipient: string | undefined): Promise<Limits> {
    const limits: SpendLimits[] = options.walletLimits ? [options.walletLimits] : []
    if (caller.keyId) {
      const { policy, wallet } = await options.keyPolicy(caller.keyId)
      if (recipient) checkRecipient({ owner: `key ${caller.keyId}`, own: wallet, allowed: policy?.allowedRecipients }, recipient)
      limits.push(limitsOfKey(caller.keyId, policy, options.defaults, find))
      return { limits, wallet: wallet ?? undefined }
    }
    if (!caller.ownerId || !isAddress(caller.ownerId, { strict: false })) {
      throw new Forbidden('a swap from the server wallet needs an API key or an allowlisted payer')
    }
    const payer = getAddress(caller.ownerId)
    const policy = await options.payerPolicy(payer)
    if (!policy) {
      throw new Forbidden(
        `payer ${payer} may not swap from the server wallet: an admin allowlists payers with PUT /admin/agent-payers/:address`,
      )
    }
    if (recipient) checkRecipient({ owner: `payer ${payer}`, own: payer, allowed: policy.allowedRecipients }, recipient)
    limits.push(limitsOfPayer(payer, policy, options.defaults, find))
    // executions keep the payer lower-case: its daily sum counts them whatever case the caller sent
    return { limits, payer: payer.toLowerCase(), wallet: payer }
  }

  /** Refuses (403) a swap over the USD caps of the limits, counting what their owners spent today. */
  async function checkCaps(
    t: Prisma.TransactionClient,
    q: RoutedQuote,
    usdValue: number | undefined,
    caller: Caller,
    { limits, payer }: Limits,
  ) {
    const since = startOfUtcDay(now())
    for (const limit of limits) {
      const owner = limit.walletWide ? 'everyone' : payer ? { payer } : { keyId: caller.keyId ?? '-' }
      checkSpend(limit, { tokenIn: q.tokenIn, tokenOut: q.tokenOut, usdValue, listed }, await spentToday(t, owner, since))
    }
  }

  /** Checks the limits and records the pending execution in one transaction, under a lock, so concurrent swaps count each other. */
  async function reserve(
    q: RoutedQuote,
    minOut: bigint,
    usdValue: number | undefined,
    request: SwapRequest,
    caller: Caller,
    idem: { scope: string; key: string } | undefined,
    limits: Limits,
  ) {
    const { payer } = limits
    return db.$transaction(async (t) => {
      if (limits.limits.length > 0) {
        await lockSpends(t)
        await checkCaps(t, q, usdValue, caller, limits)
      }
      return t.execution.create({
        data: {
          id: newId(),
          ...requesterColumns(caller, payer, idem),
          dex: q.dex.name,
          tokenIn: q.tokenIn.address,
          tokenOut: q.tokenOut.address,
          recipient: request.recipient ? getAddress(request.recipient) : null,
          route: routeOf(q),
          amountIn: q.amountIn.toString(),
          quotedAmountOut: q.amountOut.toString(),
          amountOutMinimum: minOut.toString(),
          slippageBps: request.slippageBps ?? 50,
          usdValue: usdValue ?? 0,
        },
      })
    })
  }

  /** Who gets tokenOut: the execution's recipient, else the server wallet. */
  const receiverOf = (row: Execution) => (row.recipient as Address | null) ?? tx.sender().address

  /**
   * Records the receipt; a success writes swap.confirmed in the same transaction (the outbox),
   * for the key and the wallet it concerns (the payer's, or the key's bound one when known).
   */
  async function finish(row: Execution, receipt: TransactionReceipt, wallet?: string): Promise<SwapResult> {
    const receiver = receiverOf(row)
    const success = receipt.status === 'success'
    const amountOut = success ? receivedFromLogs(receipt, row.tokenOut as Address, receiver) : 0n
    const { done, eventId } = await db.$transaction(async (t) => {
      const done = await t.execution.update({
        where: { id: row.id },
        data: {
          status: success ? 'success' : 'reverted',
          amountOut: amountOut.toString(),
          blockNumber: receipt.blockNumber,
          error: success ? null : 'the swap reverted on chain',
        },
      })
      if (!success) return { done }
      const result = resultOf(done)
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
          blockNumber: String(receipt.blockNumber),
        },
      })
      return { done, eventId }
    })
    if (eventId) options.events.send(eventId)
    log.info({ executionId: row.id, hash: receipt.transactionHash, status: done.status, amountOut: done.amountOut }, 'swap mined')
    return resultOf(done)
  }

  async function perform(
    request: SwapRequest,
    caller: Caller,
    idem: { scope: string; key: string } | undefined,
    approved: boolean,
  ): Promise<SwapResult | AwaitingApproval> {
    let row = idem
      ? await db.execution.findUnique({
          where: { idempotencyScope_idempotencyKey: { idempotencyScope: idem.scope, idempotencyKey: idem.key } },
        })
      : null
    if (row) {
      log.warn({ executionId: row.id, status: row.status }, 'resuming a swap an earlier try left unfinished')
      if (row.status === 'success' || row.status === 'reverted') return resultOf(row)
      if (row.status === 'submitted' && row.txHash && row.rawTx) {
        const outcome = await tx.resume(row.txHash as Hex, row.rawTx as Hex)
        if (outcome !== 'dropped') return finish(row, outcome)
        log.warn({ executionId: row.id, hash: row.txHash }, 'the earlier swap transaction was dropped; swapping anew')
      }
    }

    // a pause refuses what is not sent yet; a transaction signed before it is held too (chainTx)
    options.walletControl.assertSpendable()
    const limits = await limitsFor(caller, request.recipient)
    const q = await quoter.quoteFresh(request)
    checkImpact(limits.limits, impactOf(q))
    const slippage = BigInt(request.slippageBps ?? 50)
    const minOut = (q.amountOut * (10_000n - slippage)) / 10_000n
    // tokenIn at its reference value (docs/trading.md "Valuing a swap"), not at the pool it trades in
    const usdValue = await usdValueOf(q, quoter, tokens)
    const asking = row || approved ? undefined : approvalAsked(limits.limits, usdValue)
    if (asking) {
      // a swap the caps refuse is refused now, not held for a person to approve in vain
      await db.$transaction((t) => checkCaps(t, q, usdValue, caller, limits))
      const approval = await options.approvals.hold({ request, caller, payer: limits.payer, idem, quote: q, minOut, usdValue, asking })
      log.info(
        { approvalId: approval.id, keyId: caller.keyId, usdValue, approvalAboveUsd: asking.approvalAboveUsd },
        'swap held for approval',
      )
      return { status: 'awaiting_approval', approval }
    }
    if (row) {
      row = await db.execution.update({
        where: { id: row.id },
        data: {
          status: 'pending',
          quotedAmountOut: q.amountOut.toString(),
          amountOutMinimum: minOut.toString(),
          txHash: null,
          rawTx: null,
          nonce: null,
          error: null,
        },
      })
    } else {
      row = await reserve(q, minOut, usdValue, request, caller, idem, limits)
    }
    const pending = row
    const receiver = receiverOf(row)
    try {
      const approvalWei = await tx.ensureAllowance(q.tokenIn.address, q.dex.router, q.amountIn)
      if (approvalWei > 0n) {
        // the approval's gas counts against the same limits from now on (it is paid: an unpriced one counts 0)
        const gasUsd = (await gasUsdOf(approvalWei, quoter, tokens, q.blockNumber).catch(() => undefined)) ?? 0
        await db.execution.update({ where: { id: pending.id }, data: { gasUsd } })
      }
      const deadline = BigInt(Math.floor(now() / 1000) + options.deadlineSeconds)
      const { receipt } = await tx.send(
        { to: q.dex.router, data: q.dex.swapCall(q.path, q.amountIn, minOut, receiver, deadline) },
        async (signed) => {
          await db.execution.update({
            where: { id: pending.id },
            data: { status: 'submitted', txHash: signed.hash, rawTx: signed.raw, nonce: signed.nonce },
          })
        },
      )
      return await finish(pending, receipt, limits.wallet)
    } catch (error) {
      if (error instanceof WouldRevert || error instanceof WalletPaused) {
        await db.execution.update({ where: { id: pending.id }, data: { status: 'failed', error: error.message } })
      }
      throw error
    }
  }

  /** Counts how a try of a swap ended on /metrics: replays never reach here, so each swap counts once. */
  async function countOutcome(via: SwapPath, run: () => Promise<SwapResult | AwaitingApproval>): Promise<SwapResult | AwaitingApproval> {
    try {
      const result = await run()
      options.counted.inc({ outcome: isAwaitingApproval(result) ? 'held' : result.success ? 'success' : 'reverted', via })
      return result
    } catch (error) {
      options.counted.inc({ outcome: clientErrorStatus(error) === undefined ? 'error' : 'refused', via })
      throw error
    }
  }

  return {
    /** The limits a caller's spends are held to (its policy with the defaults, the wallet-wide ones): launches check them too. */
    limitsFor: async (caller: Caller) => (await limitsFor(caller, undefined)).limits,

    /**
     * Executes a swap, or holds it for approval (nothing sent) when it is over its policy's
     * approvalAboveUsd and not itself `approved`; with an idempotency key, at most once per
     * caller and key (a repeat of a held one answers the same approval).
     */
    async execute(
      request: SwapRequest,
      caller: Caller,
      idempotencyKey: string | undefined,
      { approved = false, via }: { approved?: boolean; via: SwapPath },
    ): Promise<{ result: SwapResult | AwaitingApproval; replayed: boolean }> {
      tx.sender() // 503 at once without a server wallet
      await quoter.check(request) // a bad request is answered, not stored under its idempotency key
      if (!idempotencyKey) return { result: await countOutcome(via, () => perform(request, caller, undefined, approved)), replayed: false }
      const scope = `swap:${caller.keyId ?? caller.ownerId ?? 'anonymous'}`
      const fingerprint = fingerprintOf({
        tokenIn: request.tokenIn,
        tokenOut: request.tokenOut,
        amountIn: request.amountIn,
        dex: request.dex ?? 'uniswap',
        slippageBps: request.slippageBps ?? 50,
        ...(request.recipient ? { recipient: getAddress(request.recipient) } : {}),
      })
      return idempotency.run(scope, idempotencyKey, fingerprint, () =>
        countOutcome(via, () => perform(request, caller, { scope, key: idempotencyKey }, approved)),
      )
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

export type Executor = ReturnType<typeof createExecutor>
