import { eip3009Abi, usdcDomain } from '@ats/chain'
import { paidRequestDescription, paymentRequirementsV1, paymentRequirementsV2, type PaymentTerms } from '@ats/contracts'
import { SettleError, type PaymentPayload, type PaymentRequirements, type SettleResponse } from '@x402/core/types'
import { HTTPFacilitatorClient } from '@x402/core/server'
import { firstLine, type ChainContext } from '@ats/service-kit'
import { getAbiItem, parseEventLogs, type Address, type Hex, type PublicClient, type TransactionReceipt } from 'viem'
import type { PaymentRow } from './ledger.ts'

/** What one settlement attempt came to. */
export type SettleOutcome =
  | { kind: 'settled'; txHash: string }
  /** will not settle; `blockPayer`: the payer's doing (no funds, the authorization spent elsewhere) */
  | { kind: 'failed'; reason: string; blockPayer?: boolean }
  /**
   * worth trying again later (an RPC error, a facilitator 5xx, a transaction still pending).
   * `inFlight`: a signed transaction of this payment may still be mined, so it is checked
   * again however many attempts that takes: it is never given up as failed.
   */
  | { kind: 'retry'; reason: string; inFlight?: boolean }
  /**
   * not attempted: the payer's balance covers it only once its transfers in flight are mined
   * (a balance read meanwhile may not hold them); taken up again soon, not counted as an attempt
   */
  | { kind: 'later'; reason: string }

export interface SettleHooks {
  /** a settlement transaction of these payments is signed: keep it (awaited before it is broadcast) */
  onSigned(payments: PaymentRow[], tx: { hash: Hex; raw: Hex }): Promise<void>
}

export interface Settlement {
  name: string
  /** Settles these payments, together as far as this way of settling can: one outcome per payment, in their order. */
  settle(payments: PaymentRow[], hooks: SettleHooks): Promise<SettleOutcome[]>
}

export const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase()

/** blocks per eth_getLogs call when looking for the transaction that used an authorization */
const logChunkBlocks = 5_000n
/** How far back the transaction that used an authorization is looked for, before the payment was charged. */
const searchBeforeChargeSeconds = 86_400n

const authorizationUsedEvent = getAbiItem({ abi: eip3009Abi, name: 'AuthorizationUsed' })
const authorizationCanceledEvent = getAbiItem({ abi: eip3009Abi, name: 'AuthorizationCanceled' })

/** Where the authorization of a payment went: the transaction that used (or canceled) it. */
interface AuthorizationUse {
  hash: Hex
  canceled: boolean
  /** the transfer it made (none when canceled) */
  transfer?: { to: Address; value: bigint }
}

/** The receipt, or null while the transaction is not mined (other RPC errors throw). */
export const receiptOf = (publicClient: PublicClient, hash: Hex) =>
  publicClient.getTransactionReceipt({ hash }).catch((error: Error) => {
    if (error.name === 'TransactionReceiptNotFoundError') return null
    throw error
  })

/** Waits up to `timeoutMs` for the receipt; null if the transaction is not mined by then (other RPC errors throw). */
export const waitForReceipt = (publicClient: PublicClient, hash: Hex, timeoutMs: number, pollingInterval: number) =>
  publicClient.waitForTransactionReceipt({ hash, timeout: timeoutMs, pollingInterval }).catch((error: Error) => {
    if (error.name === 'WaitForTransactionReceiptTimeoutError') return null
    throw error
  })

/**
 * Where a payment's authorization went, read from the chain: whether it is used
 * (`authorizationState`), and `reconcile`, which finds the transaction that used it and says
 * what that means for the payment. Shared by both ways of settling.
 */
export function authorizationTrace(publicClient: PublicClient) {
  const authorizationUsed = (p: PaymentRow) =>
    publicClient.readContract({
      address: p.asset as Address,
      abi: eip3009Abi,
      functionName: 'authorizationState',
      args: [p.payer as Address, p.nonce as Hex],
    })

  /**
   * The uses of authorizations a receipt records, by token, authorizer and nonce: each
   * `AuthorizationUsed` (or `AuthorizationCanceled`) with the `Transfer` the token emits right
   * after it (FiatToken v2, our DevUsdc). A batch's receipt is read once for all its payments.
   */
  const usesOf = new WeakMap<TransactionReceipt, Map<string, AuthorizationUse>>()
  const useKey = (asset: string, authorizer: string, nonce: string) => `${asset}:${authorizer}:${nonce}`.toLowerCase()
  function usesIn(receipt: TransactionReceipt): Map<string, AuthorizationUse> {
    const known = usesOf.get(receipt)
    if (known) return known
    const uses = new Map<string, AuthorizationUse>()
    const hash = receipt.transactionHash
    const logs = parseEventLogs({ abi: eip3009Abi, logs: receipt.logs })
    for (const [at, log] of logs.entries()) {
      if (log.eventName !== 'AuthorizationUsed' && log.eventName !== 'AuthorizationCanceled') continue
      const key = useKey(log.address, log.args.authorizer, log.args.nonce)
      if (log.eventName === 'AuthorizationCanceled') {
        uses.set(key, { hash, canceled: true })
        continue
      }
      const next = logs[at + 1]
      const transfer =
        next?.eventName === 'Transfer' && same(next.address, log.address) && same(next.args.from, log.args.authorizer)
          ? { to: next.args.to, value: next.args.value }
          : undefined
      uses.set(key, { hash, canceled: false, ...(transfer ? { transfer } : {}) })
    }
    usesOf.set(receipt, uses)
    return uses
  }

  /** The use of this payment's authorization recorded in `receipt`, if it holds one. */
  const useIn = (p: PaymentRow, receipt: TransactionReceipt): AuthorizationUse | undefined =>
    usesIn(receipt).get(useKey(p.asset, p.payer, p.nonce))

  /**
   * The transaction that used (or canceled) this payment's authorization: our kept one if it
   * did, else found by its log, newest blocks first, back to a day before the payment was
   * charged (or its validAfter, if later): it cannot have been used before it was valid.
   */
  async function findUse(p: PaymentRow): Promise<AuthorizationUse | undefined> {
    if (p.txHash) {
      const ours = await receiptOf(publicClient, p.txHash as Hex)
      const use = ours && useIn(p, ours)
      if (use) return use
    }
    const args = { authorizer: p.payer as Address, nonce: p.nonce as Hex }
    const floor = BigInt(Math.floor(p.chargedAt.getTime() / 1000)) - searchBeforeChargeSeconds
    const since = p.validAfter > floor ? p.validAfter : floor
    let to = await publicClient.getBlockNumber({ cacheTime: 0 })
    for (;;) {
      const from = to >= logChunkBlocks ? to - logChunkBlocks + 1n : 0n
      const range = { address: p.asset as Address, args, fromBlock: from, toBlock: to }
      const [used, canceled] = await Promise.all([
        publicClient.getLogs({ ...range, event: authorizationUsedEvent }),
        publicClient.getLogs({ ...range, event: authorizationCanceledEvent }),
      ])
      const log = [...used, ...canceled].find((l) => l.transactionHash)
      if (log) {
        const receipt = await receiptOf(publicClient, log.transactionHash!)
        return receipt ? useIn(p, receipt) : undefined
      }
      if (from === 0n || (await publicClient.getBlock({ blockNumber: from })).timestamp < since) return undefined
      to = from - 1n
    }
  }

  /** The authorization is spent: settled if it paid this payment, failed (with who spent it) if not. */
  async function reconcile(p: PaymentRow): Promise<SettleOutcome> {
    const use = await findUse(p)
    if (!use)
      return {
        kind: 'retry',
        reason: `authorization ${p.nonce} of ${p.payer} is used on chain, but the transaction that used it was not found (yet)`,
      }
    return judge(p, use)
  }

  /** What a use of the payment's authorization means for the payment. */
  function judge(p: PaymentRow, use: AuthorizationUse): SettleOutcome {
    const auth = `authorization ${p.nonce} of ${p.payer}`
    if (use.canceled) return { kind: 'failed', reason: `${auth} was canceled by the payer (transaction ${use.hash})`, blockPayer: true }
    const { transfer } = use
    if (transfer && same(transfer.to, p.payTo) && transfer.value === p.amount) return { kind: 'settled', txHash: use.hash }
    const what = transfer ? `a transfer of ${transfer.value} to ${transfer.to}` : 'no transfer from the payer'
    return {
      kind: 'failed',
      reason: `${auth} was used by transaction ${use.hash} for ${what}, not this payment of ${p.amount} to ${p.payTo}: the payer signed another authorization with the same nonce`,
      blockPayer: true,
    }
  }

  /** The payment's outcome in a mined transaction: what its authorization's use there means, or undefined if it holds none. */
  const outcomeIn = (p: PaymentRow, receipt: TransactionReceipt): SettleOutcome | undefined => {
    const use = useIn(p, receipt)
    return use && judge(p, use)
  }

  return { authorizationUsed, reconcile, outcomeIn }
}

/** The x402 `exact` requirements a payment was made against, rebuilt from the ledger row. */
function termsOf(p: PaymentRow): PaymentTerms {
  const { name, version } = usdcDomain(p.chainId, p.asset as Address)
  return {
    price: p.amount,
    payTo: p.payTo as Address,
    asset: p.asset as Address,
    chainId: p.chainId,
    resource: p.resource,
    description: paidRequestDescription,
    maxTimeoutSeconds: 60,
    token: { name, version },
  }
}

/** The body of a facilitator's POST /settle (x402 v1 or v2, as the client paid). */
function settleRequest(p: PaymentRow) {
  const terms = termsOf(p)
  const payload = {
    signature: p.signature,
    authorization: {
      from: p.payer,
      to: p.payTo,
      value: p.amount.toString(),
      validAfter: p.validAfter.toString(),
      validBefore: p.validBefore.toString(),
      nonce: p.nonce,
    },
  }
  if (p.x402Version === 2) {
    const accepted = paymentRequirementsV2(terms)
    return {
      x402Version: 2,
      paymentPayload: {
        x402Version: 2,
        resource: { url: p.resource, description: terms.description, mimeType: 'application/json' },
        accepted,
        payload,
      },
      paymentRequirements: accepted,
    }
  }
  const requirements = { ...paymentRequirementsV1(terms), network: p.network }
  return {
    x402Version: 1,
    paymentPayload: { x402Version: 1, scheme: 'exact', network: p.network, payload },
    paymentRequirements: requirements,
  }
}

const retryable = (status: number) => status >= 500 || status === 429

/** /settle calls one facilitator settlement has open at once */
const facilitatorConcurrency = 10

/**
 * Settles through an x402 facilitator with the reference client (@x402/core's
 * HTTPFacilitatorClient: POST {url}/settle with the payment payload and its requirements); the
 * facilitator submits the transfer and answers with its transaction. Its /settle takes one
 * payment, so a batch goes as that many calls, `facilitatorConcurrency` at a time: one
 * transaction per payment, none of the batch's gas saving. A 5xx, a 429, a timeout or an
 * unreachable facilitator is retried; any other refusal fails the payment with its reason,
 * unless `chain` shows the authorization used: then it is traced like an on-chain settlement's
 * (a /settle that timed out here after the facilitator had sent the transfer is refused when it
 * is retried, "nonce used", although the payment is settled).
 */
export function facilitatorSettlement(url: string, chain?: Pick<ChainContext, 'publicClient' | 'chainId'>): Settlement {
  const client = new HTTPFacilitatorClient({ url: url.replace(/\/+$/, ''), timeoutMs: 30_000 })
  const trace = chain && authorizationTrace(chain.publicClient)
  async function refused(p: PaymentRow, reason: string): Promise<SettleOutcome> {
    if (trace && p.chainId === chain!.chainId && (await trace.authorizationUsed(p))) return trace.reconcile(p)
    return { kind: 'failed', reason: `facilitator: ${reason}`, blockPayer: /insufficient_funds/i.test(reason) }
  }
  async function settleOne(p: PaymentRow): Promise<SettleOutcome> {
    const { paymentPayload, paymentRequirements } = settleRequest(p)
    let result: SettleResponse
    try {
      // the reference client is typed for v2; it sends a v1 payload as it is
      result = await client.settle(paymentPayload as PaymentPayload, paymentRequirements as PaymentRequirements)
    } catch (error) {
      if (error instanceof SettleError) {
        if (retryable(error.statusCode)) return { kind: 'retry', reason: `facilitator answered ${error.statusCode}` }
        return refused(p, error.errorReason ?? `facilitator answered ${error.statusCode}`)
      }
      const status = Number(/failed \((\d{3})\)/.exec(firstLine(error))?.[1] ?? 0)
      if (status && !retryable(status)) return refused(p, `facilitator answered ${status}`)
      return { kind: 'retry', reason: `facilitator unreachable: ${firstLine(error)}` }
    }
    if (result.success && result.transaction) return { kind: 'settled', txHash: result.transaction }
    return refused(p, result.errorReason ?? 'facilitator answered without success')
  }
  return {
    name: `through the facilitator at ${url}, one /settle per payment`,
    async settle(payments) {
      const outcomes: SettleOutcome[] = new Array(payments.length)
      let next = 0
      const worker = async () => {
        while (next < payments.length) {
          const i = next++
          outcomes[i] = await settleOne(payments[i]!).catch((error) => ({ kind: 'retry' as const, reason: firstLine(error) }))
        }
      }
      await Promise.all(Array.from({ length: Math.min(facilitatorConcurrency, payments.length) }, worker))
      return outcomes
    },
  }
}
