import { erc20Abi } from '@ats/chain'
import { Webhook } from 'standardwebhooks'
import t from 'tap'
import { privateKeyToAccount } from 'viem/accounts'
import type { Address } from 'viem'
import { adminKey, eventually, startAgentFleet, startReceiver } from './fleet.ts'
// in this process too (a process spends ~2.5 s of CPU loading the fleet's modules): approvals,
// event streams and MCP, each module with a fleet of its own inside its test, and runnable alone
import './agent/approvals.ts'
import './agent/streams.ts'
import './agent/mcp.ts'
import './agent/mcpPaid.ts'
import './agent/mcpArguments.ts'

/**
 * The agent as a paying client sees it: x402 payments on every /agent/* request, through the
 * gateway; and the webhooks its jobs send to the keys that subscribed. One fleet for the file:
 * the paid jobs belong to payers, which no webhook is for.
 */
t.test('the agent as a paying client sees it, and the webhooks of its jobs', async (t) => {
  const fleet = await startAgentFleet(t, {
    // webhooks to a local receiver (development settings: http, loopback), retried quickly
    adminEnv: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'true', WEBHOOK_RETRY_SCHEDULE: '100ms,100ms,100ms' },
  })

  // paid /agent/*
  {
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
    const balanceOf = (symbol: string, owner: Address) =>
      publicClient.readContract({ address: token(symbol), abi: erc20Abi, functionName: 'balanceOf', args: [owner] })

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
        const post = await paid('/agent/prompt', {
          method: 'POST',
          other: true,
          body: { prompt: 'price of ETH', threadId: accepted.body.threadId },
        })
        t.equal(post.status, 404)
      })

      t.test('a readonly key bound to the payer wallet lists these jobs in /portfolio/jobs', async (t) => {
        const key = await request('/admin/keys', {
          method: 'POST',
          key: adminKey,
          body: { tier: 'readonly', label: 'my wallet', wallet: payer },
        })
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
      t.same(
        { usdc: await balanceOf('USDC', serverWallet), arb: await balanceOf('ARB', serverWallet) },
        before,
        "the server wallet's balances did not move",
      )

      const allow = await request(`/admin/agent-payers/${payer}`, {
        method: 'PUT',
        key: adminKey,
        body: { label: 'trusted bot', policy: { maxUsdPerSwap: 50 } },
      })
      t.equal(allow.status, 200, JSON.stringify(allow.body))
      const executed = await finished((await paid('/agent/prompt', { method: 'POST', body: { prompt: 'swap 1 USDC for ARB' } })).body.jobId)
      t.equal(executed.status, 'complete', executed.error)
      t.match(executed.result.transactions, [
        { status: 'sent', kind: 'swap', success: true, hash: /^0x[0-9a-f]{64}$/, amountIn: '1000000' },
      ])
      t.equal(await balanceOf('USDC', serverWallet), before.usdc - 1_000_000n, 'the server wallet spent 1 USDC')
      t.ok((await balanceOf('ARB', serverWallet)) > before.arb, 'and received ARB')
    })

    t.test("402 answers of /agent/* carry x402 v2's bazaar discovery extension", async (t) => {
      const res = await request('/agent/prompt', { method: 'POST', body: { prompt: 'price of ETH' } })
      t.equal(res.status, 402)
      const required = JSON.parse(Buffer.from(res.headers.get('payment-required')!, 'base64').toString())
      t.match(required.extensions.bazaar, {
        info: {
          input: { type: 'http', method: 'POST', bodyType: 'json', body: { prompt: String } },
          output: { type: 'json', example: { status: 'pending' } },
        },
        schema: { properties: { input: { properties: { body: { properties: { prompt: { type: 'string', maxLength: 4000 } } } } } } },
        routeTemplate: '/agent/prompt',
      })
      const job = await request('/agent/job/job_x')
      t.match(JSON.parse(Buffer.from(job.headers.get('payment-required')!, 'base64').toString()).extensions.bazaar, {
        info: { input: { method: 'GET', pathParams: { id: String } } },
        routeTemplate: '/agent/job/:id',
      })
    })
  }

  // webhooks
  {
    /**
     * Webhooks through the gateway: a readwrite key subscribes with POST /webhooks, a /v1 prompt of
     * that key completes in the agent, and the job.completed event travels the agent's outbox, the
     * events stream and admin's sender to a local receiver (development settings: http, loopback).
     */
    const { request, createKey } = fleet

    const { received, url: hookUrl } = await startReceiver(t)

    t.test('the gateway lists the webhook routes in its OpenAPI document', async (t) => {
      const docs = await request('/openapi.json')
      for (const path of [
        '/webhooks',
        '/webhooks/{id}',
        '/webhooks/{id}/rotate-secret',
        '/webhooks/{id}/test',
        '/webhooks/{id}/deliveries',
        '/webhooks/{id}/deliveries/{deliveryId}/redeliver',
      ]) {
        t.ok(docs.body.paths[path], path)
      }
    })

    t.test('a /v1 prompt that completes is pushed to its key as a signed job.completed, and to no other key', async (t) => {
      const writer = await createKey('readwrite', 'webhook client')
      const stranger = await createKey('readwrite', 'someone else')
      const mine = await request('/webhooks', {
        method: 'POST',
        key: writer.key,
        body: { url: hookUrl('/mine'), events: ['job.completed'] },
      })
      t.equal(mine.status, 201)
      const theirs = await request('/webhooks', {
        method: 'POST',
        key: stranger.key,
        body: { url: hookUrl('/theirs'), events: ['job.completed'] },
      })
      t.equal(theirs.status, 201)
      const readonly = await createKey('readonly', 'reader')
      t.equal((await request('/webhooks', { key: readonly.key })).status, 403, 'a readonly key cannot subscribe')

      const completion = await request('/v1/chat/completions', {
        method: 'POST',
        key: writer.key,
        body: { model: 'ats-planner', messages: [{ role: 'user', content: 'What is the price of ARB?' }] },
      })
      t.equal(completion.status, 200)

      const got = await eventually(
        'the job.completed delivery',
        async () => received.find((r) => r.body.includes('"job.completed"')),
        30_000,
      )
      const event = new Webhook(mine.body.secret).verify(got.body, got.headers as Record<string, string>) as {
        id: string
        type: string
        data: Record<string, any>
      }
      t.equal(event.type, 'job.completed')
      t.equal(got.headers['webhook-id'], event.id)
      t.match(event.data, { jobId: String, status: 'complete', prompt: 'What is the price of ARB?' })

      const log = await request(`/webhooks/${mine.body.id}/deliveries`, { key: writer.key })
      t.equal(log.status, 200)
      t.match(log.body.deliveries, [{ eventId: event.id, eventType: 'job.completed', status: 'succeeded', attempts: 1 }])
      await new Promise((resolve) => setTimeout(resolve, 500))
      t.equal(received.filter((r) => r.body.includes('"job.completed"')).length, 1, 'one delivery: the other key got nothing')

      const tested = await request(`/webhooks/${mine.body.id}/test`, { method: 'POST', key: writer.key })
      t.equal(tested.status, 200, 'POST /webhooks/:id/test answers through the gateway')
      t.match(tested.body, { delivered: true, status: 204, eventId: /^evt_/ })
      const ping = received.find((r) => r.headers['webhook-id'] === tested.body.eventId)
      t.match(ping && new Webhook(mine.body.secret).verify(ping.body, ping.headers as Record<string, string>), { type: 'webhook.test' })
      t.equal((await request(`/webhooks/${mine.body.id}`, { key: stranger.key })).status, 404, 'another key cannot see it')
    })
  }
})
