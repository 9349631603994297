import { erc20Abi } from '@ats/chain'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment, x402Client } from '@x402/fetch'
import { createPublicClient, getAddress, http, type Address, type Hash } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { jsonRequest, type JsonRequestInit } from './jsonRequest.ts'

/**
 * A smoke test of a running fleet on the devnet, as a client sees it through its gateway:
 * API keys from the admin API, a quote, a swap mined on the chain, a paid prompt (a real
 * x402 client, @x402/fetch, paying from a devnet account) answered by the agent, and an
 * automation that runs on chain. `pnpm rehearse:images` runs it against the containers; it
 * needs nothing but the gateway's URL, the admin key, the chain's RPC URL and its address book.
 */
export interface SmokeTarget {
  gatewayUrl: string
  adminKey: string
  rpcUrl: string
  /** the devnet's address book (tokens; devnet.accounts with their public test keys) */
  book: {
    tokens: Array<{ symbol: string; address: string; decimals: number }>
    devnet: { accounts: Array<{ address: string; privateKey: `0x${string}` }> }
  }
}

export interface SmokeStep {
  name: string
  ok: boolean
  ms: number
  detail: string
}

const network = 'eip155:31337'

export async function runSmoke(target: SmokeTarget): Promise<SmokeStep[]> {
  const steps: SmokeStep[] = []
  const chain = createPublicClient({ transport: http(target.rpcUrl) })
  const token = (symbol: string) => getAddress(target.book.tokens.find((t) => t.symbol === symbol)!.address)
  const balanceOf = (symbol: string, owner: Address) =>
    chain.readContract({ address: token(symbol), abi: erc20Abi, functionName: 'balanceOf', args: [owner] })
  const mined = async (hash: Hash) => {
    const receipt = await chain.getTransactionReceipt({ hash })
    if (receipt.status !== 'success') throw new Error(`${hash} reverted`)
    return receipt.blockNumber
  }

  const call = (path: string, init: JsonRequestInit = {}) => jsonRequest(`${target.gatewayUrl}${path}`, init)
  const expect = (res: { status: number; body: unknown }, status: number, what: string) => {
    if (res.status !== status) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body as any
  }
  const until = async <T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> => {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const value = await probe()
      if (value !== undefined) return value
      if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s`)
      await new Promise((resolve) => setTimeout(resolve, 500))
    }
  }
  /** One step: timed, its error its detail; a failed step's dependants are not run. */
  const step = async <T>(name: string, body: () => Promise<{ value: T; detail: string }>): Promise<T | undefined> => {
    const started = Date.now()
    try {
      const { value, detail } = await body()
      steps.push({ name, ok: true, ms: Date.now() - started, detail })
      return value
    } catch (error) {
      steps.push({ name, ok: false, ms: Date.now() - started, detail: (error as Error).message })
      return undefined
    }
  }

  await step('health', async () => {
    const root = expect(await call('/'), 200, 'GET /')
    expect(await call('/health'), 200, 'GET /health')
    return {
      value: true,
      detail: `GET /health 200; GET / names chain ${JSON.stringify(root.chain ?? root.network ?? root.chainName ?? '?')}`,
    }
  })

  // a trader (swaps from the server wallet) and a bot bound to a wallet of its own (its automation buys for it)
  const botWallet = getAddress(privateKeyToAccount(generatePrivateKey()).address)
  const keys = await step('key', async () => {
    const trader = expect(
      await call('/admin/keys', { method: 'POST', key: target.adminKey, body: { tier: 'readwrite', label: 'image rehearsal trader' } }),
      201,
      'POST /admin/keys',
    )
    const bot = expect(
      await call('/admin/keys', {
        method: 'POST',
        key: target.adminKey,
        body: { tier: 'readwrite', label: 'image rehearsal bot', wallet: botWallet },
      }),
      201,
      'POST /admin/keys (bound)',
    )
    const listed = expect(await call('/admin/keys', { key: target.adminKey }), 200, 'GET /admin/keys')
    const ids = JSON.stringify(listed)
    if (!ids.includes(trader.id) || !ids.includes(bot.id)) throw new Error('GET /admin/keys does not list the new keys')
    return {
      value: { trader: trader.key as string, bot: bot.key as string },
      detail: `POST /admin/keys 201 twice (${trader.id}; ${bot.id} bound to ${botWallet.slice(0, 10)}…), both listed`,
    }
  })
  if (!keys) return steps

  await step('quote', async () => {
    const quote = expect(
      await call('/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1000000000000000000', { key: keys.trader }),
      200,
      'GET /swap/quote',
    )
    const usdc = Number(BigInt(quote.amountOut)) / 1e6
    if (!(usdc > 0)) throw new Error(`quote without an amount: ${JSON.stringify(quote)}`)
    return { value: quote, detail: `GET /swap/quote 200: 1 WETH -> ${usdc.toFixed(2)} USDC${quote.dex ? ` on ${quote.dex}` : ''}` }
  })

  await step('swap', async () => {
    const serverWallet = getAddress(target.book.devnet.accounts[0]!.address)
    const before = await balanceOf('ARB', serverWallet)
    const swap = expect(
      await call('/swap/execute', {
        method: 'POST',
        key: keys.trader,
        body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '8000000' },
        headers: { 'idempotency-key': `rehearse-${Date.now()}` },
      }),
      200,
      'POST /swap/execute',
    )
    if (swap.success !== true) throw new Error(`not a success: ${JSON.stringify(swap)}`)
    const block = await mined(swap.hash)
    const gained = (await balanceOf('ARB', serverWallet)) - before
    if (gained !== BigInt(swap.amountOut)) throw new Error(`the wallet got ${gained} ARB, the answer says ${swap.amountOut}`)
    return {
      value: swap,
      detail: `POST /swap/execute 200: 8 USDC -> ${(Number(gained) / 1e18).toFixed(3)} ARB, ${swap.hash.slice(0, 12)}… mined in block ${block}`,
    }
  })

  await step('paid prompt', async () => {
    const payer = privateKeyToAccount(target.book.devnet.accounts[1]!.privateKey)
    // spend controls as a careful client sets them: the devnet's USDC only, at most $0.10 a request
    const client = x402Client.fromConfig({
      schemes: [{ network, client: new ExactEvmScheme(payer) }],
      spendControls: { allowedAssets: [{ network, asset: token('USDC'), maxAmountPerPayment: '100000' }] },
    })
    const pay = wrapFetchWithPayment(fetch, client)
    const unpaid = await fetch(`${target.gatewayUrl}/agent/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"prompt":"x"}',
    })
    if (unpaid.status !== 402) throw new Error(`an unpaid prompt got ${unpaid.status}, not 402`)
    await unpaid.body?.cancel()
    const accepted = await pay(`${target.gatewayUrl}/agent/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'What is the price of ARB?' }),
    })
    const job = (await accepted.json()) as any
    if (accepted.status !== 202) throw new Error(`POST /agent/prompt (paid): ${accepted.status} ${JSON.stringify(job)}`)
    if (!accepted.headers.get('payment-response')) throw new Error('the answer carries no PAYMENT-RESPONSE')
    const done = await until('the job to complete', async () => {
      const res = await pay(`${target.gatewayUrl}/agent/job/${job.jobId}`)
      const body = (await res.json()) as any
      return ['complete', 'failed', 'cancelled'].includes(body.status) ? body : undefined
    })
    if (done.status !== 'complete') throw new Error(`job ${job.jobId} ${done.status}: ${done.error}`)
    const revenue = await until('the payments in /admin/revenue', async () => {
      const body = expect(await call('/admin/revenue', { key: target.adminKey }), 200, 'GET /admin/revenue')
      return body.requestCount >= 2 ? body : undefined
    })
    return {
      value: done,
      detail: `402 unpaid; paid by ${payer.address.slice(0, 10)}… (@x402/fetch): 202, job ${done.status}: "${String(done.result?.text).slice(0, 70)}"; /admin/revenue: ${revenue.requestCount} payments, ${revenue.totalUsd}`,
    }
  })

  await step('automation', async () => {
    const created = expect(
      await call('/automations', {
        method: 'POST',
        key: keys.bot,
        body: {
          walletAddress: botWallet,
          type: 'recurring-buy',
          name: 'image rehearsal',
          config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '2s' },
        },
      }),
      201,
      'POST /automations',
    )
    const id = created.automation.id as string
    const run = await until('a run mined', async () => {
      const runs = expect(await call(`/automations/${id}/runs`, { key: keys.bot }), 200, 'GET /automations/:id/runs').runs as any[]
      const failed = runs.find((r) => r.status === 'failed')
      if (failed) throw new Error(`run ${failed.id} failed: ${failed.error}`)
      return runs.find((r) => r.status === 'success')
    })
    const block = await mined(run.txHash)
    const arb = await balanceOf('ARB', botWallet)
    if (arb < BigInt(run.amountOut)) throw new Error(`the bound wallet has ${arb} ARB, the run bought ${run.amountOut}`)
    const deleted = expect(await call(`/automations/${id}`, { method: 'DELETE', key: keys.bot }), 200, 'DELETE /automations/:id')
    if (deleted.ok !== true) throw new Error(`DELETE answered ${JSON.stringify(deleted)}`)
    return {
      value: run,
      detail: `POST /automations 201 (${id}, 1 USDC -> ARB every 2 s); run ${run.txHash.slice(0, 12)}… mined in block ${block}, the wallet holds ${(Number(arb) / 1e18).toFixed(3)} ARB; deleted`,
    }
  })
  return steps
}
