import { erc20Abi } from '@ats/chain'
import type { PreparedSwap, UnsignedTransaction } from '@ats/contracts'
import { encodeFunctionData, formatUnits, getAddress, type Address, type Hex, type PublicClient } from 'viem'
import { revertReason } from '../chainTx.ts'
import type { Quoter } from './quotes.ts'
import { routeOf } from './quotes.ts'
import type { SwapRequest } from './executor.ts'

const pad = (gas: bigint) => (gas * 125n) / 100n

/**
 * Non-custodial swaps: the unsigned transactions `from` must send (an approval of exactly
 * amountIn when its allowance is short, then the swap to itself), simulated in order against
 * the chain's current state (eth_simulateV1), so a revert is reported before anyone signs.
 * Nothing is sent.
 */
export function createPreparer({
  client,
  quoter,
  chainId,
  deadlineSeconds,
  now = Date.now,
}: {
  client: PublicClient
  quoter: Quoter
  chainId: number
  deadlineSeconds: number
  now?: () => number
}) {
  return async function prepare(request: SwapRequest & { from: string }): Promise<PreparedSwap> {
    const from = getAddress(request.from)
    const q = await quoter.quoteFresh(request)
    const minOut = (q.amountOut * BigInt(10_000 - (request.slippageBps ?? 50))) / 10_000n
    const deadline = Math.floor(now() / 1000) + deadlineSeconds
    const [allowance, balance] = await Promise.all([
      client.readContract({ address: q.tokenIn.address, abi: erc20Abi, functionName: 'allowance', args: [from, q.dex.router] }),
      client.readContract({ address: q.tokenIn.address, abi: erc20Abi, functionName: 'balanceOf', args: [from] }),
    ])
    const calls: Array<{ kind: UnsignedTransaction['kind']; to: Address; data: Hex }> = []
    if (allowance < q.amountIn) {
      calls.push({
        kind: 'approval',
        to: q.tokenIn.address,
        data: encodeFunctionData({ abi: erc20Abi, functionName: 'approve', args: [q.dex.router, q.amountIn] }),
      })
    }
    calls.push({ kind: 'swap', to: q.dex.router, data: q.dex.swapCall(q.path, q.amountIn, minOut, from, BigInt(deadline)) })

    let simulation: PreparedSwap['simulation'] = { ok: true }
    let gas = calls.map(() => 0n)
    if (balance < q.amountIn) {
      simulation = {
        ok: false,
        error: `${from} holds ${formatUnits(balance, q.tokenIn.decimals)} ${q.tokenIn.symbol}; the swap needs ${formatUnits(q.amountIn, q.tokenIn.decimals)}`,
      }
    } else {
      try {
        const { results } = await client.simulateCalls({ account: from, calls: calls.map(({ to, data }) => ({ to, data })) })
        const failed = results.findIndex((result) => result.status !== 'success')
        if (failed >= 0) {
          const result = results[failed]!
          simulation = {
            ok: false,
            error: `the ${calls[failed]!.kind} would revert: ${result.error ? revertReason(result.error) : 'reverted'}`,
          }
        }
        gas = results.map((result) => pad(result.gasUsed))
      } catch (error) {
        simulation = { ok: false, error: `could not simulate: ${revertReason(error)}` }
      }
    }
    // a failed simulation still answers usable gas limits: generous fixed ones
    gas = gas.map((g, i) => (g > 21_000n ? g : calls[i]!.kind === 'approval' ? 80_000n : 250_000n + 150_000n * BigInt(q.path.length)))

    return {
      from,
      dex: q.dex.name,
      tokenIn: q.tokenIn.symbol,
      tokenOut: q.tokenOut.symbol,
      amountIn: q.amountIn.toString(),
      expectedAmountOut: q.amountOut.toString(),
      amountOutMinimum: minOut.toString(),
      route: routeOf(q),
      deadline,
      blockNumber: q.blockNumber.toString(),
      transactions: calls.map((call, i) => ({
        kind: call.kind,
        chainId,
        from,
        to: call.to,
        data: call.data,
        value: '0',
        gas: gas[i]!.toString(),
      })),
      simulation,
    }
  }
}

export type Preparer = ReturnType<typeof createPreparer>
