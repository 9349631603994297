// Settlement on chain from the server wallet: payments in batches, one Multicall3 transaction each.
import { eip3009Abi, MULTICALL3_ADDRESS, multicall3Abi } from '@ats/chain'
import { firstLine, type ChainContext } from '@ats/service-kit'
import {
  decodeErrorResult,
  decodeFunctionResult,
  encodeFunctionData,
  parseSignature,
  parseTransaction,
  recoverTransactionAddress,
  type Address,
  type Hex,
  type TransactionReceipt,
  type TransactionSerialized,
} from 'viem'
import type { PaymentRow } from './ledger.ts'
import { authorizationTrace, receiptOf, same, waitForReceipt, type SettleHooks, type SettleOutcome, type Settlement } from './settlement.ts'

export interface OnchainSettlementOptions {
  /** how long one attempt waits for a receipt before it leaves the transaction to a later attempt */
  receiptTimeoutMs?: number
  /** the most gas one settlement transaction may use: a batch estimated over it is sent as several */
  batchGas?: bigint
}

/** A kept transaction that can never settle its payment: mined without it, or its nonce taken. */
interface Replaceable {
  kind: 'replaceable'
  why: string
}

const gasMargin = (estimate: bigint) => (estimate * 125n) / 100n
/** batches this large or larger are sized from the last estimate (see gasOf) */
const sizedFromEstimate = 10
const reestimateMs = 30_000
/** gas a batch is given besides its payments' share: the transaction and Multicall3's own cost, more than a cold start of both */
const batchOverhead = 100_000n
/** whose balance a payment draws on: the payer's, in the payment's token */
const holderOf = (p: PaymentRow) => `${p.asset.toLowerCase()}:${p.payer.toLowerCase()}`
const oldestFirst = (a: PaymentRow, b: PaymentRow) => a.chargedAt.getTime() - b.chargedAt.getTime() || (a.id < b.id ? -1 : 1)

/** The `transferWithAuthorization` call of a payment's signed authorization. */
function transferData(p: PaymentRow): Hex {
  const { r, s, v, yParity } = parseSignature(p.signature as Hex)
  return encodeFunctionData({
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
}

/** Multicall3's aggregate3 over these payments' transfers, each allowed to fail alone. */
const aggregate3Data = (payments: PaymentRow[]): Hex =>
  encodeFunctionData({
    abi: multicall3Abi,
    functionName: 'aggregate3',
    args: [payments.map((p) => ({ target: p.asset as Address, allowFailure: true, callData: transferData(p) }))],
  })

/** The settlement transaction of these payments: a lone payment's transfer straight to its token (as cheap as it gets), a batch through Multicall3. */
const transactionOf = (payments: PaymentRow[]) =>
  payments.length === 1
    ? { to: payments[0]!.asset as Address, data: transferData(payments[0]!) }
    : { to: MULTICALL3_ADDRESS, data: aggregate3Data(payments) }

/** A failed call's revert reason, as the token wrote it. */
function revertReason(data: Hex): string {
  try {
    const { errorName, args } = decodeErrorResult({ data })
    return errorName === 'Error' ? String(args[0]) : `${errorName}(${args.join(', ')})`
  } catch {
    return data === '0x' ? 'reverted without a reason' : `reverted with ${data.slice(0, 74)}`
  }
}

/**
 * Settles on chain: the server wallet submits the payments' `transferWithAuthorization` calls,
 * many in one transaction, through the kit's wallet sender, which shares the wallet's nonces with
 * every other sender of the fleet. Whatever the chain will refuse is found by reads and a
 * simulation of the batch first: no gas is spent on a transfer bound to fail. Each payment's
 * outcome is read from its own logs in the receipt: a call that failed inside a mined batch fails
 * no other.
 *
 * Exactly once, per payment: the signed transaction is kept (`onSigned`, one write for the
 * batch, before the broadcast). A payment that has one is never signed anew while that transaction
 * can still be mined: its receipt is read, else the same bytes are broadcast again ("already
 * known" and "nonce too low" answers are not errors by themselves). Only when its nonce went to
 * another transaction of the wallet (the wallet's mined count is past it and it has no receipt: it
 * can never be mined), or it was mined without this payment's transfer, and the authorization is
 * still unused on chain, does the payment go into a new batch. EIP-3009 itself makes a second
 * transfer impossible (the authorization's nonce is spent by the first); this rule keeps the
 * wallet from sending transactions bound to fail.
 */
export function onchainSettlement(
  chain: Pick<ChainContext, 'publicClient' | 'chainId' | 'sender'>,
  { receiptTimeoutMs = 60_000, batchGas = 8_000_000n }: OnchainSettlementOptions = {},
): Settlement {
  const { publicClient } = chain
  const pollingInterval = Math.max(50, Math.min(1_000, Math.floor(receiptTimeoutMs / 10)))
  const { authorizationUsed, reconcile, outcomeIn } = authorizationTrace(publicClient)

  /**
   * What this settlement's batches in flight will take from each payer (by holderOf): a balance
   * read meanwhile may not hold those transfers yet.
   */
  const committed = new Map<string, bigint>()
  const commit = (payments: PaymentRow[], sign: 1n | -1n) => {
    for (const p of payments) {
      const left = (committed.get(holderOf(p)) ?? 0n) + sign * p.amount
      if (left > 0n) committed.set(holderOf(p), left)
      else committed.delete(holderOf(p))
    }
  }

  /**
   * Waits up to receiptTimeoutMs for this transaction's receipt; null if it is not mined by then.
   * (viem answers the receipt of a transaction that replaced it, same sender and nonce: that is
   * not ours, and is null here too; its nonce used, the next look finds ours replaced.)
   */
  const awaitReceipt = async (hash: Hex) => {
    const receipt = await waitForReceipt(publicClient, hash, receiptTimeoutMs, pollingInterval)
    return receipt && same(receipt.transactionHash, hash) ? receipt : null
  }

  /** What the chain would refuse for one payment, read first; undefined if a transfer can be sent. */
  async function refusal(p: PaymentRow): Promise<SettleOutcome | undefined> {
    const { used, balances } = await readState([p])
    if (used[0]) return reconcile(p)
    if (p.validBefore <= BigInt(Math.floor(Date.now() / 1000))) return expired(p)
    const balance = balances.get(holderOf(p))!
    return balance < p.amount ? poor(p, balance, 0n) : undefined
  }

  // not the payer's doing: the gateway takes only payments valid PAYMENT_MIN_VALIDITY_SECONDS more
  // (60 s), so an expiry means settlement lagged (ours): never blocks. What the payer can do to a
  // payment (spend its nonce, cancel it, move the money) blocks: see reconcile and `poor`
  const expired = (p: PaymentRow, hash?: Hex): SettleOutcome => ({
    kind: 'failed',
    reason: `authorization expired at ${p.validBefore} before ${hash ? `transaction ${hash} was mined` : 'it was settled'}`,
  })
  const poor = (p: PaymentRow, balance: bigint, earlier: bigint): SettleOutcome => ({
    kind: 'failed',
    reason: `insufficient funds: ${p.payer} holds ${balance - earlier}, the payment is ${p.amount}${earlier > 0n ? ` (${balance} less ${earlier} for its earlier payments settling with it)` : ''}`,
    blockPayer: true,
  })

  /** A mined transaction's outcome for one payment: its transfer in the logs, else what the reads say. */
  async function afterMined(p: PaymentRow, receipt: TransactionReceipt): Promise<SettleOutcome | Replaceable> {
    const outcome = outcomeIn(p, receipt)
    if (outcome) return outcome
    const hash = receipt.transactionHash
    return {
      kind: 'replaceable',
      why: receipt.status === 'success' ? `its transfer failed in transaction ${hash}` : `transaction ${hash} reverted`,
    }
  }

  /**
   * Picks up a kept transaction of these payments: its receipt, else the same bytes broadcast
   * again. 'replaceable' for a payment it can never settle: mined without its transfer, or the
   * transaction's nonce taken by another.
   */
  async function resume(payments: PaymentRow[], hash: Hex, raw: Hex): Promise<Array<SettleOutcome | Replaceable>> {
    const mined = await receiptOf(publicClient, hash)
    if (mined) return Promise.all(payments.map((p) => afterMined(p, mined)))
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
    const gone = payments.map(() => ({
      kind: 'replaceable' as const,
      why: `transaction ${hash} was replaced (its nonce ${tx.nonce} went to another transaction)`,
    }))
    if (await replaced()) return gone
    const receipt = await awaitReceipt(hash)
    if (receipt) return Promise.all(payments.map((p) => afterMined(p, receipt)))
    if (await replaced()) return gone
    // not mined yet: final for a payment only once the chain is past validBefore with its authorization unused
    const latest = await publicClient.getBlock({ blockTag: 'latest' })
    return Promise.all(
      payments.map(async (p): Promise<SettleOutcome> => {
        if (latest.timestamp >= p.validBefore && !(await authorizationUsed(p))) return expired(p, hash)
        return { kind: 'retry', reason: `transaction ${hash} not mined yet (${broadcast})`, inFlight: true }
      }),
    )
  }

  /** Each payment's authorization state and each payer's balance, in one call. */
  async function readState(payments: PaymentRow[]) {
    const holders = [...new Map(payments.map((p) => [holderOf(p), p])).values()]
    const results = (await publicClient.multicall({
      multicallAddress: MULTICALL3_ADDRESS,
      allowFailure: false,
      // one eth_call for the batch (viem would otherwise cut it into 1 kB pieces)
      batchSize: 0,
      contracts: [
        ...payments.map((p) => ({
          address: p.asset as Address,
          abi: eip3009Abi,
          functionName: 'authorizationState' as const,
          args: [p.payer as Address, p.nonce as Hex] as const,
        })),
        ...holders.map((p) => ({
          address: p.asset as Address,
          abi: eip3009Abi,
          functionName: 'balanceOf' as const,
          args: [p.payer as Address] as const,
        })),
      ],
    })) as Array<boolean | bigint>
    const balances = new Map(holders.map((p, i) => [holderOf(p), results[payments.length + i] as bigint]))
    return { used: results.slice(0, payments.length) as boolean[], balances }
  }

  /**
   * Why each transfer would fail if the batch were sent now (undefined: it would go through), from
   * one eth_call on the pending block: the next block's time, not the last one's (a quiet chain's
   * last block may predate a fresh authorization's validAfter).
   */
  async function simulate(payments: PaymentRow[]): Promise<Array<string | undefined>> {
    const { data } = await publicClient.call({
      account: chain.sender().address,
      to: MULTICALL3_ADDRESS,
      data: aggregate3Data(payments),
      blockTag: 'pending',
    })
    const results = decodeFunctionResult({ abi: multicall3Abi, functionName: 'aggregate3', data: data ?? '0x' })
    return results.map((result) => (result.success ? undefined : revertReason(result.returnData)))
  }

  /**
   * Gas per payment of the last batch estimated (with the margin), and when: batches of
   * `sizedFromEstimate` payments or more within `reestimateMs` of it are given that much per
   * payment plus `batchOverhead`, not an estimate of their own (a node estimates a batch by
   * running it many times over: half the cost of settling it on the devnet). Read afresh after
   * that time (the chain's fees per byte move, on Arbitrum with L1's) and after a batch used
   * nearly all the gas it was given.
   */
  let perPayment: { gas: bigint; at: number } | undefined

  /** The gas limit of a settlement transaction of these payments. */
  async function gasOf(payments: PaymentRow[]): Promise<bigint> {
    const n = BigInt(payments.length)
    if (perPayment && payments.length >= sizedFromEstimate && Date.now() - perPayment.at < reestimateMs)
      return batchOverhead + perPayment.gas * n
    const gas = gasMargin(await publicClient.estimateGas({ account: chain.sender().address, ...transactionOf(payments) }))
    if (payments.length >= sizedFromEstimate) perPayment = { gas: (gas + n - 1n) / n, at: Date.now() }
    return gas
  }

  const noteGasUsed = (receipt: TransactionReceipt, limit: bigint) => {
    if (receipt.gasUsed * 100n >= limit * 95n) perPayment = undefined
  }

  /** The batch cut into transactions of at most batchGas each (a lone payment goes whatever its gas), with their gas. */
  async function plan(payments: PaymentRow[]): Promise<Array<{ payments: PaymentRow[]; gas: bigint }>> {
    const gas = await gasOf(payments)
    if (gas <= batchGas || payments.length === 1) return [{ payments, gas }]
    const size = Math.ceil(payments.length / Number((gas + batchGas - 1n) / batchGas))
    const parts: PaymentRow[][] = []
    for (let i = 0; i < payments.length; i += size) parts.push(payments.slice(i, i + size))
    return (await Promise.all(parts.map(plan))).flat()
  }

  /**
   * Signs (kept first) and broadcasts one transaction of these payments; answers once it is
   * broadcast, with its payments' outcomes to come (read from its receipt).
   */
  async function send(
    payments: PaymentRow[],
    gas: bigint,
    hooks: SettleHooks,
    replacing: Map<PaymentRow, string>,
  ): Promise<{ outcomes: Promise<SettleOutcome[]> }> {
    let kept: Hex | undefined
    let hash: Hex
    try {
      ;({ hash } = await chain.sender().send(
        { ...transactionOf(payments), gas },
        {
          onSigned: async (signed) => {
            await hooks.onSigned(payments, { hash: signed.hash, raw: signed.raw })
            kept = signed.hash
          },
        },
      ))
    } catch (error) {
      // kept, then the broadcast failed or timed out: the node may hold it; never signed anew
      const reason = kept ? `transaction ${kept} kept; its broadcast failed (${firstLine(error)})` : firstLine(error)
      return { outcomes: Promise.resolve(payments.map((p) => ({ kind: 'retry', reason, inFlight: Boolean(kept ?? p.rawTx) }))) }
    }
    const judge = async (p: PaymentRow, receipt: TransactionReceipt | null | Error): Promise<SettleOutcome> => {
      if (receipt instanceof Error)
        return { kind: 'retry', reason: `transaction ${hash} sent; its receipt could not be read (${firstLine(receipt)})`, inFlight: true }
      if (!receipt) {
        const replaces = replacing.get(p)
        return {
          kind: 'retry',
          reason: `transaction ${hash} not mined within ${receiptTimeoutMs} ms${replaces ? ` (it replaces ${replaces})` : ''}`,
          inFlight: true,
        }
      }
      const mined = await afterMined(p, receipt)
      if (mined.kind !== 'replaceable') return mined
      // its call failed: the reads tell why (spent by someone else first, expired, funds gone); else try again
      return (await refusal(p)) ?? { kind: 'retry', reason: mined.why }
    }
    const outcomes = awaitReceipt(hash)
      .catch((error: Error) => error)
      .then((receipt) => {
        if (receipt && !(receipt instanceof Error)) noteGasUsed(receipt, gas)
        return Promise.all(
          payments.map((p) =>
            // sent: whatever the reads answer, it may be mined, so it is never given up
            judge(p, receipt).catch(
              (error): SettleOutcome => ({ kind: 'retry', reason: `transaction ${hash} sent; ${firstLine(error)}`, inFlight: true }),
            ),
          ),
        )
      })
    return { outcomes }
  }

  /** Payments with no transaction that can still settle them: read, judged, and sent in batches. */
  async function settleNew(payments: PaymentRow[], hooks: SettleHooks, replacing: Map<PaymentRow, string>) {
    const outcomes = new Map<PaymentRow, SettleOutcome>()
    if (payments.length === 0) return outcomes
    const ordered = [...payments].sort(oldestFirst)
    const { used, balances } = await readState(ordered)
    const now = BigInt(Math.floor(Date.now() / 1000))
    const taking = new Map<string, bigint>()
    const covered: PaymentRow[] = []
    const traced: Array<Promise<void>> = []
    for (const [i, p] of ordered.entries()) {
      // used first: an authorization used by us (or anyone) for this payment settled it, expired or not
      if (used[i]) traced.push(reconcile(p).then((outcome) => void outcomes.set(p, outcome)))
      else if (p.validBefore <= now) outcomes.set(p, expired(p))
      else {
        const holder = holderOf(p)
        const balance = balances.get(holder)!
        const inFlight = committed.get(holder) ?? 0n
        const earlier = taking.get(holder) ?? 0n
        if (balance - inFlight - earlier >= p.amount) {
          taking.set(holder, earlier + p.amount)
          covered.push(p)
        } else if (inFlight > 0n) {
          // the balance read may not hold the payer's transfers in flight yet: judged once they are mined
          outcomes.set(p, {
            kind: 'later',
            reason: `${p.payer} holds ${balance}, of which ${inFlight} is in settlement transactions in flight`,
          })
        } else outcomes.set(p, poor(p, balance, earlier))
      }
    }
    await Promise.all(traced)
    if (covered.length === 0) return outcomes
    commit(covered, 1n)
    try {
      const refused = await simulate(covered)
      const sendable = covered.filter((p, i) => {
        if (refused[i] === undefined) return true
        // the token refuses it now (a signature it does not take, not yet valid…): tried again later
        outcomes.set(p, { kind: 'retry', reason: `the token refuses its transfer: ${refused[i]}`, inFlight: Boolean(p.rawTx) })
        return false
      })
      if (sendable.length === 0) return outcomes
      // signed one after another (the wallet's nonces), their receipts awaited side by side
      const waits: Array<Promise<void>> = []
      for (const part of await plan(sendable)) {
        const sent = await send(part.payments, part.gas, hooks, replacing)
        waits.push(
          sent.outcomes.then((results) => {
            for (const [i, p] of part.payments.entries()) outcomes.set(p, results[i]!)
          }),
        )
      }
      await Promise.all(waits)
    } finally {
      commit(covered, -1n)
    }
    return outcomes
  }

  return {
    name: 'on chain, from the server wallet, in batches',
    async settle(payments, hooks) {
      const outcomes = new Map<PaymentRow, SettleOutcome>()
      const fresh: PaymentRow[] = []
      const replacing = new Map<PaymentRow, string>()
      const kept = new Map<string, PaymentRow[]>()
      const legacy: PaymentRow[] = []
      for (const p of payments) {
        if (p.chainId !== chain.chainId)
          outcomes.set(p, { kind: 'failed', reason: `payment is on chain ${p.chainId}; this admin settles on chain ${chain.chainId}` })
        else if (p.txHash && p.rawTx) kept.set(p.txHash, [...(kept.get(p.txHash) ?? []), p])
        else if (p.txHash) legacy.push(p)
        else fresh.push(p)
      }
      const resumed = [...kept].map(async ([hash, rows]) => {
        commit(rows, 1n)
        try {
          const results = await resume(rows, hash as Hex, rows[0]!.rawTx as Hex)
          rows.forEach((p, i) => {
            const result = results[i]!
            if (result.kind !== 'replaceable') outcomes.set(p, result)
            else {
              // it can never be mined: a new one may be signed, unless the authorization is spent
              fresh.push(p)
              replacing.set(p, result.why)
            }
          })
        } finally {
          commit(rows, -1n)
        }
      })
      // sent before transactions were kept: its receipt only
      const looked = legacy.map(async (p) => {
        const receipt = await receiptOf(publicClient, p.txHash as Hex)
        if (receipt?.status === 'success') outcomes.set(p, { kind: 'settled', txHash: p.txHash! })
        else if (!receipt) outcomes.set(p, { kind: 'retry', reason: `transaction ${p.txHash} not mined yet` })
        else fresh.push(p)
      })
      await Promise.all([...resumed, ...looked])
      try {
        for (const [p, outcome] of await settleNew(fresh, hooks, replacing)) outcomes.set(p, outcome)
      } catch (error) {
        // a read or a send that failed: the payments not yet judged are tried again (one with a
        // kept transaction stays in flight: it may be mined)
        for (const p of fresh)
          if (!outcomes.has(p)) outcomes.set(p, { kind: 'retry', reason: firstLine(error), inFlight: Boolean(p.rawTx) })
      }
      return payments.map((p) => outcomes.get(p)!)
    },
  }
}
