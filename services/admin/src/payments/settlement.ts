import { eip3009Abi, usdcDomain } from '@ats/chain'
import { paidRequestDescription, paymentRequirementsV1, paymentRequirementsV2, type PaymentTerms } from '@ats/contracts'
import { SettleError, type PaymentPayload, type PaymentRequirements, type SettleResponse } from '@x402/core/types'
import { HTTPFacilitatorClient } from '@x402/core/server'
import type { ChainContext } from '@ats/service-kit'
import { encodeFunctionData, parseSignature, type Address, type Hex } from 'viem'
import type { PaymentRow } from './ledger.ts'

/** What one settlement attempt came to. */
export type SettleOutcome =
  | { kind: 'settled'; txHash: string }
  | { kind: 'failed'; reason: string; insufficientFunds?: boolean }
  /** worth trying again later (an RPC error, a facilitator 5xx, a transaction still pending) */
  | { kind: 'retry'; reason: string }

export interface Settlement {
  name: string
  settle(payment: PaymentRow, onSubmitted: (txHash: string) => Promise<void>): Promise<SettleOutcome>
}

const firstLine = (error: unknown) => (error instanceof Error ? error.message : String(error)).split('\n')[0]!

/**
 * Settles on chain: the server wallet submits `transferWithAuthorization` on the payment's
 * USDC through the kit's wallet sender, which shares the wallet's nonces with every other
 * sender of the fleet. Whatever the chain will refuse (expired, already used, not enough
 * funds) is found by reads first, so no gas is spent on a transaction bound to revert.
 */
export function onchainSettlement(chain: Pick<ChainContext, 'publicClient' | 'chainId' | 'sender'>): Settlement {
  const { publicClient } = chain

  return {
    name: 'on chain, from the server wallet',
    async settle(p, onSubmitted) {
      const sender = chain.sender()
      if (p.chainId !== chain.chainId) return { kind: 'failed', reason: `payment is on chain ${p.chainId}; this admin settles on chain ${chain.chainId}` }
      const asset = p.asset as Address
      const from = p.payer as Address
      if (p.txHash) {
        const receipt = await publicClient.getTransactionReceipt({ hash: p.txHash as Hex }).catch(() => null)
        if (receipt?.status === 'success') return { kind: 'settled', txHash: p.txHash }
        if (!receipt) return { kind: 'retry', reason: `transaction ${p.txHash} not mined yet` }
      }
      const now = BigInt(Math.floor(Date.now() / 1000))
      if (p.validBefore <= now) return { kind: 'failed', reason: `authorization expired at ${p.validBefore} before it was settled` }
      const used = await publicClient.readContract({ address: asset, abi: eip3009Abi, functionName: 'authorizationState', args: [from, p.nonce as Hex] })
      if (used) return { kind: 'failed', reason: 'authorization already used on chain' }
      const balance = await publicClient.readContract({ address: asset, abi: eip3009Abi, functionName: 'balanceOf', args: [from] })
      if (balance < p.amount) return { kind: 'failed', reason: `insufficient funds: ${from} holds ${balance}, the payment is ${p.amount}`, insufficientFunds: true }

      const { r, s, v, yParity } = parseSignature(p.signature as Hex)
      const data = encodeFunctionData({
        abi: eip3009Abi,
        functionName: 'transferWithAuthorization',
        args: [from, p.payTo as Address, p.amount, p.validAfter, p.validBefore, p.nonce as Hex, Number(v ?? 27n + BigInt(yParity)), r, s],
      })
      const { hash } = await sender.send({ to: asset, data })
      await onSubmitted(hash)
      const receipt = await publicClient.waitForTransactionReceipt({ hash, timeout: 60_000 })
      return receipt.status === 'success' ? { kind: 'settled', txHash: hash } : { kind: 'failed', reason: `transaction ${hash} reverted` }
    },
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
      paymentPayload: { x402Version: 2, resource: { url: p.resource, description: terms.description, mimeType: 'application/json' }, accepted, payload },
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
 * or an unreachable facilitator is retried; any other refusal fails the payment with its reason.
 */
export function facilitatorSettlement(url: string): Settlement {
  const client = new HTTPFacilitatorClient({ url: url.replace(/\/+$/, ''), timeoutMs: 30_000 })
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
          return refused(error.errorReason ?? `facilitator answered ${error.statusCode}`)
        }
        const status = Number(/failed \((\d{3})\)/.exec(firstLine(error))?.[1] ?? 0)
        if (status && !retryable(status)) return refused(`facilitator answered ${status}`)
        return { kind: 'retry', reason: `facilitator unreachable: ${firstLine(error)}` }
      }
      if (result.success && result.transaction) return { kind: 'settled', txHash: result.transaction }
      return refused(result.errorReason ?? 'facilitator answered without success')
    },
  }
}

function refused(reason: string): SettleOutcome {
  return { kind: 'failed', reason: `facilitator: ${reason}`, insufficientFunds: /insufficient_funds/i.test(reason) }
}
