import { eip3009Abi, usdcDomain } from '@ats/chain'
import { paidRequestDescription, paymentRequirementsV1, paymentRequirementsV2, type PaymentTerms } from '@ats/contracts'
import { SettleError, type PaymentPayload, type PaymentRequirements, type SettleResponse } from '@x402/core/types'
import { HTTPFacilitatorClient } from '@x402/core/server'
import type { ChainContext } from '@ats/service-kit'
import {
  encodeFunctionData,
  getAbiItem,
  parseEventLogs,
  parseSignature,
  parseTransaction,
  recoverTransactionAddress,
  type Address,
  type Hex,
  type PublicClient,
  type TransactionReceipt,
  type TransactionSerialized,
} from 'viem'
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

export interface SettleHooks {
  /** a settlement transaction is signed: keep it (awaited before it is broadcast) */
  onSigned(tx: { hash: Hex; raw: Hex }): Promise<void>
}

export interface Settlement {
  name: string
  settle(payment: PaymentRow, hooks: SettleHooks): Promise<SettleOutcome>
}

const firstLine = (error: unknown) => (error instanceof Error ? error.message : String(error)).split('\n')[0]!
const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase()

export interface OnchainSettlementOptions {
  /** how long one attempt waits for a receipt before it leaves the transaction to a later attempt */
  receiptTimeoutMs?: number
  /** blocks per eth_getLogs call when looking for the transaction that used an authorization */
  logChunkBlocks?: bigint
}

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
const receiptOf = (publicClient: PublicClient, hash: Hex) =>
  publicClient.getTransactionReceipt({ hash }).catch((error: Error) => {
    if (error.name === 'TransactionReceiptNotFoundError') return null
    throw error
  })

/**
 * Where a payment's authorization went, read from the chain: whether it is used
 * (`authorizationState`), and `reconcile`, which finds the transaction that used it and says
 * what that means for the payment. Shared by both ways of settling.
 */
export function authorizationTrace(publicClient: PublicClient, logChunkBlocks = 5_000n) {
  const authorizationUsed = (p: PaymentRow) =>
    publicClient.readContract({
      address: p.asset as Address,
      abi: eip3009Abi,
      functionName: 'authorizationState',
      args: [p.payer as Address, p.nonce as Hex],
    })

  /** The use of this payment's authorization recorded in `receipt`, if it holds one. */
  function useIn(p: PaymentRow, receipt: TransactionReceipt): AuthorizationUse | undefined {
    const logs = parseEventLogs({ abi: eip3009Abi, logs: receipt.logs }).filter((log) => same(log.address, p.asset))
    const at = logs.findIndex(
      (log) =>
        (log.eventName === 'AuthorizationUsed' || log.eventName === 'AuthorizationCanceled') &&
        same(log.args.authorizer, p.payer) &&
        same(log.args.nonce, p.nonce),
    )
    if (at < 0) return undefined
    const hash = receipt.transactionHash
    if (logs[at]!.eventName === 'AuthorizationCanceled') return { hash, canceled: true }
    // the token marks the authorization used, then transfers (FiatToken v2, our DevUsdc)
    const transfer = logs.slice(at + 1).find((log) => log.eventName === 'Transfer' && same(log.args.from, p.payer))
    return {
      hash,
      canceled: false,
      ...(transfer?.eventName === 'Transfer' ? { transfer: { to: transfer.args.to, value: transfer.args.value } } : {}),
    }
  }

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
    const auth = `authorization ${p.nonce} of ${p.payer}`
    if (!use) return { kind: 'retry', reason: `${auth} is used on chain, but the transaction that used it was not found (yet)` }
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

  return { authorizationUsed, reconcile }
}

/**
 * Settles on chain: the server wallet submits `transferWithAuthorization` on the payment's
 * USDC through the kit's wallet sender, which shares the wallet's nonces with every other
 * sender of the fleet. Whatever the chain will refuse (expired, already used, not enough
 * funds) is found by reads first, so no gas is spent on a transaction bound to revert.
 *
 * Exactly once: the signed transaction is kept (`onSigned`, before the broadcast). A payment
 * that has one is never signed anew while that transaction can still be mined: its receipt is
 * read, else the same bytes are broadcast again ("already known" and "nonce too low" answers are
 * not errors by themselves). Only when its nonce went to another transaction of the wallet
 * (the wallet's mined count is past it and it has no receipt: it can never be mined) or it was
 * mined and reverted, and the authorization is still unused on chain, is a new one signed.
 * EIP-3009 itself makes a second transfer impossible (the authorization's nonce is spent by the
 * first); this rule keeps the wallet from sending transactions bound to revert.
 *
 * Never wrongly failed: an authorization found used on chain is traced to the transaction that
 * used it (`AuthorizationUsed(payer, nonce)` and the `Transfer` the token emits right after it).
 * Whoever sent it (this admin earlier, another relayer), if it moved this payment's amount from
 * the payer to payTo the payment is settled with that hash. The payer may sign two
 * authorizations with one nonce (it binds to the payer, not to the transfer): if the other one
 * was used, or the payer canceled the nonce, the payment failed, and the reason names it.
 */
export function onchainSettlement(
  chain: Pick<ChainContext, 'publicClient' | 'chainId' | 'sender'>,
  { receiptTimeoutMs = 60_000, logChunkBlocks = 5_000n }: OnchainSettlementOptions = {},
): Settlement {
  const { publicClient } = chain
  const pollingInterval = Math.max(50, Math.min(1_000, Math.floor(receiptTimeoutMs / 10)))

  /**
   * Waits up to receiptTimeoutMs for this transaction's receipt; null if it is not mined by then.
   * (viem answers the receipt of a transaction that replaced it, same sender and nonce: that is
   * not ours, and is null here too; its nonce used, the next look finds ours replaced.)
   */
  const awaitReceipt = (hash: Hex) =>
    publicClient.waitForTransactionReceipt({ hash, timeout: receiptTimeoutMs, pollingInterval }).then(
      (receipt) => (receipt.transactionHash.toLowerCase() === hash.toLowerCase() ? receipt : null),
      (error: Error) => {
        if (error.name === 'WaitForTransactionReceiptTimeoutError') return null
        throw error
      },
    )

  const { authorizationUsed, reconcile } = authorizationTrace(publicClient, logChunkBlocks)

  /** What the chain would refuse, read first; undefined if a transfer can be sent. */
  async function refusal(p: PaymentRow): Promise<SettleOutcome | undefined> {
    // used first: an authorization used by us (or anyone) for this payment settled it, expired or not
    if (await authorizationUsed(p)) return reconcile(p)
    const now = BigInt(Math.floor(Date.now() / 1000))
    // not the payer's doing: the gateway takes only payments valid PAYMENT_MIN_VALIDITY_SECONDS more
    // (60 s), so an expiry means settlement lagged (ours): never blocks. What the payer can do to a
    // payment (spend its nonce, cancel it, move the money) blocks: see reconcile and the balance below
    if (p.validBefore <= now) return { kind: 'failed', reason: `authorization expired at ${p.validBefore} before it was settled` }
    const from = p.payer as Address
    const balance = await publicClient.readContract({
      address: p.asset as Address,
      abi: eip3009Abi,
      functionName: 'balanceOf',
      args: [from],
    })
    if (balance < p.amount)
      return { kind: 'failed', reason: `insufficient funds: ${from} holds ${balance}, the payment is ${p.amount}`, blockPayer: true }
    return undefined
  }

  /**
   * Picks up the kept transaction: its receipt, else the same bytes broadcast again. 'replaceable'
   * when it can never succeed: mined and reverted, or its nonce taken by another transaction.
   */
  async function resume(p: PaymentRow, hash: Hex, raw: Hex): Promise<SettleOutcome | { kind: 'replaceable'; why: string }> {
    const mined = await receiptOf(publicClient, hash)
    if (mined)
      return mined.status === 'success' ? { kind: 'settled', txHash: hash } : { kind: 'replaceable', why: `transaction ${hash} reverted` }
    const tx = parseTransaction(raw as TransactionSerialized)
    const sender = await recoverTransactionAddress({ serializedTransaction: raw as TransactionSerialized })
    // another transaction of the wallet waiting in the node with this nonce: sending ours could
    // replace it (a higher fee); wait for that one to be mined instead
    const known = await publicClient.getTransaction({ hash }).then(
      () => true,
      () => false,
    )
    const taken = !known && (await publicClient.getTransactionCount({ address: sender, blockTag: 'pending' })) > tx.nonce!
    let broadcast = taken ? 'not broadcast again: another transaction holds its nonce in the node' : 'broadcast again'
    if (!taken) {
      try {
        await publicClient.sendRawTransaction({ serializedTransaction: raw })
      } catch (error) {
        // "already known", "nonce too low", "replacement underpriced"…: what the chain holds decides
        broadcast = `broadcast again: ${firstLine(error)}`
      }
    }
    // its nonce used (count read first) and still no receipt: another transaction took the nonce
    const replaced = async () =>
      (await publicClient.getTransactionCount({ address: sender, blockTag: 'latest' })) > tx.nonce! &&
      !(await receiptOf(publicClient, hash))
    const gone = {
      kind: 'replaceable' as const,
      why: `transaction ${hash} was replaced (its nonce ${tx.nonce} went to another transaction)`,
    }
    if (await replaced()) return gone
    const receipt = await awaitReceipt(hash)
    if (receipt)
      return receipt.status === 'success' ? { kind: 'settled', txHash: hash } : { kind: 'replaceable', why: `transaction ${hash} reverted` }
    if (await replaced()) return gone
    // not mined yet: final only once the chain is past validBefore with the authorization unused
    const latest = await publicClient.getBlock({ blockTag: 'latest' })
    if (latest.timestamp >= p.validBefore && !(await authorizationUsed(p))) {
      return { kind: 'failed', reason: `authorization expired at ${p.validBefore} before transaction ${hash} was mined` }
    }
    return { kind: 'retry', reason: `transaction ${hash} not mined yet (${broadcast})`, inFlight: true }
  }

  return {
    name: 'on chain, from the server wallet',
    async settle(p, { onSigned }) {
      if (p.chainId !== chain.chainId)
        return { kind: 'failed', reason: `payment is on chain ${p.chainId}; this admin settles on chain ${chain.chainId}` }
      if (p.txHash && p.rawTx) {
        const resumed = await resume(p, p.txHash as Hex, p.rawTx as Hex)
        if (resumed.kind !== 'replaceable') return resumed
        // it can never be mined: a new one may be signed, unless the authorization is spent
        const refused = await refusal(p)
        return refused ?? sendNew(p, onSigned, resumed.why)
      }
      if (p.txHash) {
        // sent before transactions were kept: its receipt only
        const receipt = await receiptOf(publicClient, p.txHash as Hex)
        if (receipt?.status === 'success') return { kind: 'settled', txHash: p.txHash }
        if (!receipt) return { kind: 'retry', reason: `transaction ${p.txHash} not mined yet` }
      }
      return (await refusal(p)) ?? sendNew(p, onSigned)
    },
  }

  async function sendNew(p: PaymentRow, onSigned: SettleHooks['onSigned'], replacing?: string): Promise<SettleOutcome> {
    const { r, s, v, yParity } = parseSignature(p.signature as Hex)
    const data = encodeFunctionData({
      abi: eip3009Abi,
      functionName: 'transferWithAuthorization',
      args: [
        p.payer as Address,
        p.payTo as Address,
        p.amount,
        p.validAfter,
        p.validBefore,
        p.nonce as Hex,
        Number(v ?? 27n + BigInt(yParity)),
        r,
        s,
      ],
    })
    let kept: Hex | undefined
    let hash: Hex
    try {
      ;({ hash } = await chain.sender().send(
        { to: p.asset as Address, data },
        {
          onSigned: async (signed) => {
            await onSigned({ hash: signed.hash, raw: signed.raw })
            kept = signed.hash
          },
        },
      ))
    } catch (error) {
      // kept, then the broadcast failed or timed out: the node may hold it; never signed anew
      if (kept) return { kind: 'retry', reason: `transaction ${kept} kept; its broadcast failed (${firstLine(error)})`, inFlight: true }
      throw error
    }
    const receipt = await awaitReceipt(hash).catch((error: Error) => error)
    if (receipt instanceof Error)
      return { kind: 'retry', reason: `transaction ${hash} sent; its receipt could not be read (${firstLine(receipt)})`, inFlight: true }
    if (!receipt)
      return {
        kind: 'retry',
        reason: `transaction ${hash} not mined within ${receiptTimeoutMs} ms${replacing ? ` (it replaces ${replacing})` : ''}`,
        inFlight: true,
      }
    if (receipt.status === 'success') return { kind: 'settled', txHash: hash }
    // reverted: the reads tell why (spent by someone else first, expired, funds gone); else try again
    return (await refusal(p)) ?? { kind: 'retry', reason: `transaction ${hash} reverted` }
  }
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
export function settleRequest(p: PaymentRow) {
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

/**
 * Settles through an x402 facilitator with the reference client (@x402/core's
 * HTTPFacilitatorClient: POST {url}/settle with the payment payload and its requirements); the
 * facilitator submits the transfer and answers with its transaction. A 5xx, a 429, a timeout
 * or an unreachable facilitator is retried; any other refusal fails the payment with its reason,
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
  return {
    name: `through the facilitator at ${url}`,
    async settle(p) {
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
    },
  }
}
