// The executor of swaps from the server wallet: who may spend, the quote, the caps, the approval hold, the router call and its receipt.
import { checkRecipient, erc20Abi } from '@ats/chain'
import type { AwaitingApproval, SpendPolicy, SwapBody, SwapResult } from '@ats/contracts'
import { Forbidden, fingerprintOf, type IdempotencyStore, type Logger } from '@ats/service-kit'
import { WalletPaused, type WalletControlWatch } from '@ats/wallet'
import { getAddress, isAddress, parseEventLogs, type Address, type Hex, type TransactionReceipt } from 'viem'
import type { ApprovalStore } from '../approvals/approvals.ts'
import type { Grants, GrantState } from '../grants/grants.ts'
import type { ChainTx } from '../chainTx.ts'
import { WouldRevert } from '../errors.ts'
import type { Execution } from '../generated/prisma/client.ts'
import { swapResultOf, type Caller, type ExecutionStore, type IdempotencyRef, type SpentToday } from './executions.ts'
import { countOutcome, type SwapCounter, type SwapPath } from './metrics.ts'
import { approvalAsked, checkImpact, checkSpend, limitsOf, type SpendDefaults, type SpendLimits } from './policy.ts'
import { impactOf, type Quoter, type RoutedQuote } from './quotes.ts'
import type { TokenResolver } from './tokens.ts'
import { gasUsdOf, usdValueOf } from './usd.ts'

export type SwapRequest = Pick<SwapBody, 'tokenIn' | 'tokenOut' | 'amountIn'> & {
  dex?: SwapBody['dex'] | undefined
  slippageBps?: number | undefined
  /** who receives tokenOut (NATS callers: an automation's wallet); the server wallet by default */
  recipient?: string | undefined
  /** the user's own wallet to swap from under its on-chain grant (and pay out to); the server wallet by default */
  from?: string | undefined
  /** without `from`: the caller's own wallet when it has an active grant for tokenIn (the agent's swaps) */
  fromGrant?: boolean | undefined
}

export interface ExecutorOptions {
  /** the rows of executions, and what was spent today */
  executions: ExecutionStore
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
  /** swaps from users' own wallets under their grants */
  grants: Grants
  /** ats_swaps_total: each swap by how it ended and how it came (a replay is not counted again) */
  counted: SwapCounter
  log: Logger
  now?: () => number
}

/** A caller's limits: the payer (lower case) of a swap made for a payer, and the wallet its events concern. */
interface Limits {
  limits: SpendLimits[]
  payer?: string
  wallet?: string | undefined
}

/** The amount of `token` the receipt's Transfer logs moved to `to`. */
function receivedFromLogs(receipt: TransactionReceipt, token: Address, to: Address): bigint {
  const transfers = parseEventLogs({ abi: erc20Abi, eventName: 'Transfer', logs: receipt.logs })
  return transfers
    .filter((log) => getAddress(log.address) === getAddress(token) && getAddress(log.args.to) === getAddress(to))
    .reduce((sum, log) => sum + log.args.value, 0n)
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
  const { executions, quoter, tokens, tx, idempotency, log } = options
  const now = options.now ?? Date.now
  const limitsWithDefaults = (owner: string, policy: SpendPolicy | null) =>
    limitsOf(owner, policy, options.defaults, (ref) => tokens.bySymbol(ref))
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
      limits.push(limitsWithDefaults(`key ${caller.keyId}`, policy))
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
    limits.push(limitsWithDefaults(`payer ${payer}`, policy))
    // executions keep the payer lower-case: its daily sum counts them whatever case the caller sent
    return { limits, payer: payer.toLowerCase(), wallet: payer }
  }

  /**
   * Who may swap from a user's own wallet under its grant: a key bound to that wallet, or the
   * wallet itself (a payer). The chain caps the amount (the grant); the caller's policy still holds
   * the swap for approval and refuses it over its price-impact ceiling, but its USD caps (what the
   * server wallet may spend) do not apply to the user's tokens.
   */
  async function limitsForGrant(caller: Caller, from: Address): Promise<Limits> {
    const userFunds = (limits: SpendLimits): SpendLimits => ({ ...limits, maxUsdPerSwap: undefined, maxUsdPerDay: undefined })
    if (caller.keyId) {
      const { policy, wallet } = await options.keyPolicy(caller.keyId)
      if (!wallet || getAddress(wallet) !== from) {
        throw new Forbidden(
          `key ${caller.keyId} is not bound to ${from}: only a key bound to the wallet swaps from it under its grant (POST /admin/keys with "wallet")`,
        )
      }
      return { limits: [userFunds(limitsWithDefaults(`key ${caller.keyId}`, policy))], wallet: from }
    }
    if (caller.ownerId && isAddress(caller.ownerId, { strict: false }) && getAddress(caller.ownerId) === from) {
      const payer = from.toLowerCase()
      const policy = await options.payerPolicy(from)
      return { limits: [userFunds(limitsWithDefaults(`payer ${from}`, policy ?? {}))], payer, wallet: from }
    }
    throw new Forbidden(`a swap from ${from} is asked by the wallet itself or by a key bound to it`)
  }

  /**
   * The caller's own wallet (a key's bound wallet, or the payer) when it has an active grant that
   * spends tokenIn, with the grants read (the swap picks its grant from them, not from a second read).
   */
  async function grantWallet(caller: Caller, tokenInRef: string): Promise<{ from: Address; known: GrantState[] } | undefined> {
    if (!options.grants.delegate) return undefined
    const own = caller.keyId ? (await options.keyPolicy(caller.keyId)).wallet : caller.ownerId
    if (!own || !isAddress(own, { strict: false })) return undefined
    const from = getAddress(own)
    const [tokenIn, known] = await Promise.all([tokens.resolve('tokenIn', tokenInRef), options.grants.of(from)])
    return options.grants.spends(known, tokenIn.address) ? { from, known } : undefined
  }

  /** Refuses (403) a swap over the USD caps of the limits, counting what their owners spent today. */
  async function checkCaps(spent: SpentToday, q: RoutedQuote, usdValue: number | undefined, caller: Caller, { limits, payer }: Limits) {
    for (const limit of limits) {
      const owner = limit.walletWide ? 'everyone' : payer ? { payer } : { keyId: caller.keyId ?? '-' }
      checkSpend(limit, { tokenIn: q.tokenIn, tokenOut: q.tokenOut, usdValue, listed }, await spent(owner))
    }
  }

  /** Who gets tokenOut: the execution's recipient, else the server wallet. */
  const receiverOf = (row: Execution) => (row.recipient as Address | null) ?? tx.sender().address

  /** Records the receipt with what the swap received, for the wallet its events concern. */
  async function finish(row: Execution, receipt: TransactionReceipt, wallet?: string): Promise<SwapResult> {
    const success = receipt.status === 'success'
    const amountOut = success ? receivedFromLogs(receipt, row.tokenOut as Address, receiverOf(row)) : 0n
    const done = await executions.mined(row, { success, amountOut, blockNumber: receipt.blockNumber }, wallet)
    log.info({ executionId: row.id, hash: receipt.transactionHash, status: done.status, amountOut: done.amountOut }, 'swap mined')
    return swapResultOf(done)
  }

  /**
   * The delegate's call of TradeGrants.swap for the grant's owner: checked against the chain first
   * (a grant used up or revoked since the check answers in words, nothing sent), then sent from the
   * delegate's own signer; the server wallet neither pays nor receives anything.
   */
  async function sendUnderGrant(row: Execution, grant: GrantState, q: RoutedQuote, minOut: bigint, wallet: string | undefined) {
    const grants = options.grants
    const deadline = BigInt(Math.floor(now() / 1000) + options.deadlineSeconds)
    const call = grants.swapCall(grant, q.dex.name, q.dex.encodePath(q.path), q.amountIn, minOut, deadline)
    try {
      const gas = await grants.check(call) // its estimate is the limit sent: no second estimate
      const { receipt } = await tx.send({ ...call, gas }, (signed) => executions.submitted(row.id, signed), grants.sender())
      return await finish(row, receipt, wallet)
    } catch (error) {
      const refusal = grants.refusalOf(error)
      if (refusal || error instanceof WouldRevert || error instanceof WalletPaused) {
        await executions.failed(row.id, (refusal ?? (error as Error)).message)
      }
      throw refusal ?? error
    }
  }

  async function perform(
    request: SwapRequest,
    caller: Caller,
    idem: IdempotencyRef | undefined,
    approved: boolean,
  ): Promise<SwapResult | AwaitingApproval> {
    const row = idem ? await executions.ofIdempotencyKey(idem) : null
    if (row) {
      log.warn({ executionId: row.id, status: row.status }, 'resuming a swap an earlier try left unfinished')
      if (row.status === 'success' || row.status === 'reverted') return swapResultOf(row)
      if (row.status === 'submitted' && row.txHash && row.rawTx) {
        const outcome = await tx.resume(row.txHash as Hex, row.rawTx as Hex)
        if (outcome !== 'dropped') return finish(row, outcome)
        log.warn({ executionId: row.id, hash: row.txHash }, 'the earlier swap transaction was dropped; swapping anew')
      }
    }

    // a pause refuses what is not sent yet; a transaction signed before it is held too (chainTx)
    options.walletControl.assertSpendable()
    const own = !request.from && request.fromGrant ? await grantWallet(caller, request.tokenIn) : undefined
    const from = request.from ? getAddress(request.from) : own?.from
    const limits = from ? await limitsForGrant(caller, from) : await limitsFor(caller, request.recipient)
    const q = await quoter.quoteFresh(request)
    checkImpact(limits.limits, impactOf(q))
    const grant = from
      ? await options.grants.grantFor(
          from,
          {
            tokenIn: q.tokenIn.address,
            tokenOut: q.tokenOut.address,
            dex: q.dex.name,
            amountIn: q.amountIn,
          },
          own?.known,
        )
      : undefined
    const slippageBps = request.slippageBps ?? 50
    const minOut = (q.amountOut * (10_000n - BigInt(slippageBps))) / 10_000n
    // tokenIn at its reference value (docs/trading.md "Valuing a swap"), not at the pool it trades in
    const usdValue = await usdValueOf(q, quoter, tokens)
    const asking = row || approved ? undefined : approvalAsked(limits.limits, usdValue)
    if (asking) {
      // a swap the caps refuse is refused now, not held for a person to approve in vain
      await checkCaps(executions.spent, q, usdValue, caller, limits)
      const approval = await options.approvals.hold({
        request: from ? { ...request, from } : request,
        caller,
        payer: limits.payer,
        idem,
        quote: q,
        minOut,
        usdValue,
        asking,
      })
      log.info(
        { approvalId: approval.id, keyId: caller.keyId, usdValue, approvalAboveUsd: asking.approvalAboveUsd },
        'swap held for approval',
      )
      return { status: 'awaiting_approval', approval }
    }
    const pending = row
      ? await executions.requote(row.id, q.amountOut, minOut)
      : await executions.reserve(
          {
            quote: q,
            minOut,
            usdValue,
            recipient: from ?? request.recipient,
            grantId: grant?.id,
            slippageBps,
            caller,
            payer: limits.payer,
            idem,
          },
          limits.limits.length > 0 ? (spent) => checkCaps(spent, q, usdValue, caller, limits) : undefined,
        )
    if (grant) return sendUnderGrant(pending, grant, q, minOut, limits.wallet)
    try {
      const approvalWei = await tx.ensureAllowance(q.tokenIn.address, q.dex.router, q.amountIn)
      if (approvalWei > 0n) {
        // the approval's gas counts against the same limits from now on (it is paid: an unpriced one counts 0)
        const gasUsd = (await gasUsdOf(approvalWei, quoter, tokens, q.blockNumber).catch(() => undefined)) ?? 0
        await executions.approvalGas(pending.id, gasUsd)
      }
      const deadline = BigInt(Math.floor(now() / 1000) + options.deadlineSeconds)
      const { receipt } = await tx.send(
        { to: q.dex.router, data: q.dex.swapCall(q.path, q.amountIn, minOut, receiverOf(pending), deadline) },
        (signed) => executions.submitted(pending.id, signed),
      )
      return await finish(pending, receipt, limits.wallet)
    } catch (error) {
      if (error instanceof WouldRevert || error instanceof WalletPaused) await executions.failed(pending.id, error.message)
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
      if (!request.from) tx.sender() // 503 at once without a server wallet
      await quoter.check(request) // a bad request is answered, not stored under its idempotency key
      const counted = (idem: IdempotencyRef | undefined) =>
        countOutcome(options.counted, via, () => perform(request, caller, idem, approved))
      if (!idempotencyKey) return { result: await counted(undefined), replayed: false }
      const scope = `swap:${caller.keyId ?? caller.ownerId ?? 'anonymous'}`
      const fingerprint = fingerprintOf({
        tokenIn: request.tokenIn,
        tokenOut: request.tokenOut,
        amountIn: request.amountIn,
        dex: request.dex ?? 'uniswap',
        slippageBps: request.slippageBps ?? 50,
        ...(request.recipient ? { recipient: getAddress(request.recipient) } : {}),
        ...(request.from ? { from: getAddress(request.from) } : {}),
        ...(request.fromGrant ? { fromGrant: true } : {}),
      })
      return idempotency.run(scope, idempotencyKey, fingerprint, () => counted({ scope, key: idempotencyKey }))
    },
  }
}

export type Executor = ReturnType<typeof createExecutor>
