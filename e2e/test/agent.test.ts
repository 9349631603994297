import { erc20Abi } from '@ats/chain'
import t from 'tap'
import { privateKeyToAccount } from 'viem/accounts'
import type { Address } from 'viem'
import { adminKey, startAgentFleet } from './fleet.ts'

/** The agent as a paying client sees it: x402 payments on every /agent/* request, through the gateway. */
const fleet = await startAgentFleet(t)
const { request, pay, devnet, publicClient, serverWallet } = fleet
const payer = fleet.payer.address
const otherPayer = privateKeyToAccount(devnet.accounts[2]!.privateKey)
const paid = async (path: string, init: { method?: string; body?: unknown; other?: boolean; headers?: Record<string, string> } = {}) =>
  request(path, { ...init, headers: { 'x-payment': await pay(init.other ? { payer: otherPayer } : {}), ...init.headers } })

async function finished(jobId: string) {
  for (;;) {
    const res = await paid(`/agent/job/${jobId}`)
    if (['complete', 'failed', 'cancelled'].includes(res.body.status)) return res.body
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}
const token = (symbol: string) => devnet.book.tokens.find((entry) => entry.symbol === symbol)!.address as Address
const balanceOf = (symbol: string, owner: Address) => publicClient.readContract({ address: token(symbol), abi: erc20Abi, functionName: 'balanceOf', args: [owner] })

t.test('a paid prompt: 202, poll, complete with the live devnet price; a follow-up sees the thread', async (t) => {
  const accepted = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'What is the price of ARB?' } })
  t.equal(accepted.status, 202)
  t.ok(accepted.headers.get('x-payment-response'), 'the payment was charged')
  const job = await finished(accepted.body.jobId)
  t.equal(job.status, 'complete', job.error)
  t.same(job.result.toolCalls, ['get_prices'])
  const reader = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readonly', label: 'prices' } })
  const prices = await request('/market/prices', { key: reader.body.key })
  const arb = prices.body.prices.ARB.price as number
  const shown = /ARB[^$]*\$([0-9,]+(?:\.[0-9]+)?)/.exec(job.result.text)
  t.ok(shown, `a dollar price in "${job.result.text}"`)
  t.ok(Math.abs(Number(shown![1]!.replace(/,/g, '')) - arb) / arb < 0.005, `"${job.result.text}" shows the live price ${arb}`)

  const follow = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'and GMX?', threadId: accepted.body.threadId } })
  const second = await finished(follow.body.jobId)
  t.match(second.result.text, /GMX/)
  const thread = await paid(`/agent/thread/${accepted.body.threadId}`)
  t.equal(thread.body.messages.length, 4)

  t.test('another payer gets 404 for the job and the thread, and cannot post into the thread', async (t) => {
    t.equal((await paid(`/agent/job/${accepted.body.jobId}`, { other: true })).status, 404)
    t.equal((await paid(`/agent/thread/${accepted.body.threadId}`, { other: true })).status, 404)
    const post = await paid('/agent/prompt', { method: 'POST', other: true, body: { prompt: 'price of ETH', threadId: accepted.body.threadId } })
    t.equal(post.status, 404)
  })

  t.test('a readonly key bound to the payer wallet lists these jobs in /portfolio/jobs', async (t) => {
    const key = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readonly', label: 'my wallet', wallet: payer } })
    t.equal(key.status, 201, JSON.stringify(key.body))
    const jobs = await request('/portfolio/jobs?limit=2', { key: key.body.key })
    t.equal(jobs.status, 200)
    t.same(
      jobs.body.jobs.map((j: any) => [j.id, j.prompt]),
      [
        [follow.body.jobId, 'and GMX?'],
        [accepted.body.jobId, 'What is the price of ARB?'],
      ],
    )
  })
})

t.test('bad prompts: 4001 characters is 400, an unknown thread 404', async (t) => {
  const long = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'x'.repeat(4001) } })
  t.equal(long.status, 400)
  t.match(long.body.error, /prompt/)
  const unknown = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'price of ETH', threadId: 'thr_unknown' } })
  t.equal(unknown.status, 404)
})

t.test('the events stream through the gateway: pending, running, complete, from right after the 202', async (t) => {
  const accepted = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'price of LINK' } })
  const res = await fetch(`${fleet.gateway.url}/agent/job/${accepted.body.jobId}/events`, { headers: { 'x-payment': await pay() } })
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /text\/event-stream/)
  const statuses = [...(await res.text()).matchAll(/event: status\ndata: (.*)\n/g)].map((m) => JSON.parse(m[1]!).status)
  t.same(statuses, ['pending', 'running', 'complete'])
})

t.test("whose money: a payer's swap is prepared for their wallet; an allowlisted payer's executes", async (t) => {
  const before = { usdc: await balanceOf('USDC', serverWallet), arb: await balanceOf('ARB', serverWallet) }
  const accepted = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'swap 1 USDC for ARB' } })
  const job = await finished(accepted.body.jobId)
  t.equal(job.status, 'complete', job.error)
  t.ok(job.result.transactions.length >= 1)
  for (const tx of job.result.transactions) {
    t.match(tx, { status: 'prepared', tool: 'swap', tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000' })
    t.equal(tx.transaction.from.toLowerCase(), payer.toLowerCase(), 'for the payer to sign')
  }
  t.equal(job.result.transactions.at(-1).kind, 'swap')
  t.same({ usdc: await balanceOf('USDC', serverWallet), arb: await balanceOf('ARB', serverWallet) }, before, "the server wallet's balances did not move")

  const allow = await request(`/admin/agent-payers/${payer}`, { method: 'PUT', key: adminKey, body: { label: 'trusted bot', policy: { maxUsdPerSwap: 50 } } })
  t.equal(allow.status, 200, JSON.stringify(allow.body))
  const executed = await finished((await paid('/agent/prompt', { method: 'POST', body: { prompt: 'swap 1 USDC for ARB' } })).body.jobId)
  t.equal(executed.status, 'complete', executed.error)
  t.match(executed.result.transactions, [{ status: 'sent', kind: 'swap', success: true, hash: /^0x[0-9a-f]{64}$/, amountIn: '1000000' }])
  t.equal(await balanceOf('USDC', serverWallet), before.usdc - 1_000_000n, 'the server wallet spent 1 USDC')
  t.ok((await balanceOf('ARB', serverWallet)) > before.arb, 'and received ARB')
})

t.test("402 answers of /agent/* carry x402 v2's bazaar discovery extension", async (t) => {
  const res = await request('/agent/prompt', { method: 'POST', body: { prompt: 'price of ETH' } })
  t.equal(res.status, 402)
  const required = JSON.parse(Buffer.from(res.headers.get('payment-required')!, 'base64').toString())
  t.match(required.extensions.bazaar, {
    info: { input: { type: 'http', method: 'POST', bodyType: 'json', body: { prompt: String } }, output: { type: 'json', example: { status: 'pending' } } },
    schema: { properties: { input: { properties: { body: { properties: { prompt: { type: 'string', maxLength: 4000 } } } } } } },
    routeTemplate: '/agent/prompt',
  })
  const job = await request('/agent/job/job_x')
  t.match(JSON.parse(Buffer.from(job.headers.get('payment-required')!, 'base64').toString()).extensions.bazaar, { info: { input: { method: 'GET', pathParams: { id: String } } }, routeTemplate: '/agent/job/:id' })
})
