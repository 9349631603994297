import type { SignedTx, WalletSender } from '@ats/chain'
import type { ChainContext } from '@ats/service-kit'
import type { WalletControlWatch } from '@ats/wallet'
import { erc20Abi, maxUint256, encodeFunctionData, type Address, type Hex, type PublicClient, type TransactionReceipt } from 'viem'
import { ChainUnavailable, ReceiptTimeout, WouldRevert } from './errors.ts'

/** Our own errors pass; anything else on the way to the chain is the RPC failing: 502 with its reason. */
export function rethrowAsChainError(error: unknown): never {
  throw (error as { code?: string }).code?.startsWith('ATS_ERR_') ? error : new ChainUnavailable(revertReason(error))
}

/** The short reason of a viem error: the revert reason when there is one. */
export function revertReason(error: unknown): string {
  const e = error as { shortMessage?: string; message?: string; cause?: { reason?: string; shortMessage?: string } }
  return e.cause?.reason ?? e.shortMessage ?? e.message?.split('\n')[0] ?? String(error)
}

export interface ChainTxOptions {
  chain: ChainContext
  receiptTimeoutMs: number
  receiptPollMs: number
  /** the kill switch: while paused nothing is signed or broadcast (423) */
  walletControl: Pick<WalletControlWatch, 'assertSpendable'>
}

/** What the service does with the chain's transactions: sends through the fleet's wallet sender and waits for receipts. */
export function chainTx({ chain, receiptTimeoutMs, receiptPollMs, walletControl }: ChainTxOptions) {
  const client: PublicClient = chain.publicClient
  const approving = new Map<string, Promise<void>>()

  async function receiptOf(hash: Hex): Promise<TransactionReceipt> {
    try {
      return await client.waitForTransactionReceipt({ hash, timeout: receiptTimeoutMs, pollingInterval: receiptPollMs })
    } catch (error) {
      if ((error as Error).name === 'WaitForTransactionReceiptTimeoutError') throw new ReceiptTimeout(hash, receiptTimeoutMs)
      throw error
    }
  }

  /**
   * Sends from the server wallet and waits for the receipt. `onSigned` runs before the
   * broadcast (store the hash and raw transaction there, so a retry can pick it up). A call
   * that would revert throws WouldRevert (422) with the reason, and nothing is sent; so does a
   * paused wallet (423).
   */
  async function send(
    tx: { to?: Address; data: Hex; gas?: bigint },
    onSigned?: (signed: SignedTx) => Promise<void>,
    sender: WalletSender = chain.sender(),
  ) {
    walletControl.assertSpendable()
    let signed: SignedTx
    try {
      signed = await sender.send(tx, onSigned ? { onSigned } : {})
    } catch (error) {
      if (isRevert(error)) throw new WouldRevert(`the transaction would revert: ${revertReason(error)}`)
      throw error
    }
    return { signed, receipt: await receiptOf(signed.hash) }
  }

  /**
   * Picks up a transaction an earlier try signed: its receipt, or, when the node has not seen
   * it, the raw transaction broadcast again. 'dropped' when its nonce went to another
   * transaction, so it can never be mined and the action may run anew.
   */
  async function resume(hash: Hex, raw: Hex): Promise<TransactionReceipt | 'dropped'> {
    const mined = await client.getTransactionReceipt({ hash }).catch(() => null)
    if (mined) return mined
    // signed before a pause, perhaps never broadcast: held until the wallet resumes
    walletControl.assertSpendable()
    try {
      await client.sendRawTransaction({ serializedTransaction: raw })
    } catch (error) {
      const message = revertReason(error).toLowerCase()
      if (message.includes('nonce too low') || message.includes('nonce is too low')) {
        const late = await client.getTransactionReceipt({ hash }).catch(() => null)
        return late ?? 'dropped'
      }
      // "already known" and the like: the node has it; wait for it
    }
    return receiptOf(hash)
  }

  /**
   * Makes sure `spender` may take `amount` of `token` from the server wallet: an unlimited
   * approval, sent once per token and spender (concurrent swaps in this process wait for it).
   * Returns the wei of gas this call paid for it: 0 when it sent none.
   */
  async function ensureAllowance(token: Address, spender: Address, amount: bigint): Promise<bigint> {
    const key = `${token}:${spender}`
    for (;;) {
      const running = approving.get(key)
      if (!running) break
      await running.catch(() => {})
    }
    const owner = chain.sender().address
    const allowance = await client.readContract({ address: token, abi: erc20Abi, functionName: 'allowance', args: [owner, spender] })
    if (allowance >= amount) return 0n
    let paid = 0n
    const approval = (async () => {
      const { receipt } = await send({
        to: token,
        data: encodeFunctionData({ abi: erc20Abi, functionName: 'approve', args: [spender, maxUint256] }),
      })
      paid = receipt.gasUsed * receipt.effectiveGasPrice
      if (receipt.status !== 'success')
        throw new WouldRevert(`the approval of ${token} for ${spender} reverted (${receipt.transactionHash})`)
    })()
    approving.set(key, approval)
    try {
      await approval
    } finally {
      approving.delete(key)
    }
    return paid
  }

  /** The most a transaction from the server wallet can cost in wei, as the wallet sender would send it: its gas estimate plus 25%, at the max fee per gas. */
  async function costOf(tx: { to?: Address; data: Hex }): Promise<bigint> {
    try {
      const [gas, fees] = await Promise.all([client.estimateGas({ account: chain.sender().address, ...tx }), client.estimateFeesPerGas()])
      return ((gas * 125n) / 100n) * fees.maxFeePerGas
    } catch (error) {
      if (isRevert(error)) throw new WouldRevert(`the transaction would revert: ${revertReason(error)}`)
      return rethrowAsChainError(error)
    }
  }

  return { send, resume, receiptOf, ensureAllowance, costOf, client, sender: () => chain.sender() }
}

export type ChainTx = ReturnType<typeof chainTx>

/** Whether a viem error says the call reverted or found no contract (rather than that the RPC failed). */
export function isRevert(error: unknown): boolean {
  for (let e = error as { name?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (
      ['ContractFunctionRevertedError', 'ContractFunctionZeroDataError', 'ExecutionRevertedError', 'EstimateGasExecutionError'].includes(
        e.name ?? '',
      )
    )
      return true
  }
  return false
}
