import { startService } from '@ats/service-kit/testing'
import t from 'tap'
import { agentService } from '../src/service.ts'
import { eventually, payerHeaders, startStack } from './helpers.ts'

t.test('cancel, and the run-time limit', async (top) => {
  // prices from "CoinGecko" (the local stand-in), which a test can make hang for 20 s
  const stack = await startStack(top, { noAgent: true, marketEnv: { PRICE_SOURCE: 'coingecko', SOURCE_TIMEOUT_MS: '20000' } })
  const api = await startService(top, agentService, { ...stack.agentEnv, AGENT_ROLE: 'api' })
  const call = async (path: string, init: { method?: string; body?: unknown } = {}) => {
    const res = await fetch(`${api.url}${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: { ...payerHeaders(payer), ...(init.body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  const payer = stack.devnet.accounts[1]!.address

  top.test('a pending job is cancelled, stays cancelled when a worker comes, and a second cancel is 404', async (t) => {
    const { body } = await call('/agent/prompt', { body: { prompt: 'price of ETH' } })
    const pending = await call(`/agent/job/${body.jobId}`)
    t.same(Object.keys(pending.body).sort(), ['createdAt', 'id', 'status'], 'the running form while pending')
    t.equal(pending.body.status, 'pending')
    const cancel = await call(`/agent/job/${body.jobId}`, { method: 'DELETE' })
    t.equal(cancel.status, 200)
    t.same(cancel.body, { success: true, jobId: body.jobId })
    const cancelled = await call(`/agent/job/${body.jobId}`)
    t.match(cancelled.body, { status: 'cancelled', prompt: 'price of ETH', updatedAt: Number })
    t.notOk('result' in cancelled.body)
    const again = await call(`/agent/job/${body.jobId}`, { method: 'DELETE' })
    t.equal(again.status, 404)
    t.match(again.body.error, /not found, or already finished/)

    // a worker now takes the queued message and leaves the job alone
    // started for the rest of the file (top), not only this subtest
    await startService(top, agentService, { ...stack.agentEnv, AGENT_ROLE: 'worker', AGENT_WORKER_CONCURRENCY: '1', AGENT_JOB_MAX_RUN_MS: '3000', AGENT_TOOL_TIMEOUT_MS: '20000' })
    const next = await call('/agent/prompt', { body: { prompt: 'trending pools' } })
    t.equal((await poll(next.body.jobId)).status, 'complete')
    t.equal((await call(`/agent/job/${body.jobId}`)).body.status, 'cancelled')
  })

  async function poll(jobId: string, until = ['complete', 'failed', 'cancelled']) {
    return eventually(`job ${jobId} to finish`, async () => {
      const job = (await call(`/agent/job/${jobId}`)).body
      return until.includes(job.status) ? job : undefined
    })
  }

  top.test('a running job on a slow tool is cancelled and its step aborted: the worker is free for the next job', async (t) => {
    stack.upstreams.behave('/simple/price', 'hang')
    const { body } = await call('/agent/prompt', { body: { prompt: 'price of ETH' } })
    await eventually('the tool to reach the upstream', async () => (stack.upstreams.calls('/simple/price') > 0 ? true : undefined))
    t.equal((await call(`/agent/job/${body.jobId}`)).body.status, 'running')
    const cancel = await call(`/agent/job/${body.jobId}`, { method: 'DELETE' })
    t.same(cancel.body, { success: true, jobId: body.jobId })
    // one worker slot (AGENT_WORKER_CONCURRENCY=1), and the upstream hangs for 20 s: only an aborted step frees it
    const next = await call('/agent/prompt', { body: { prompt: 'show trending pools' } })
    const done = await poll(next.body.jobId)
    t.equal(done.status, 'complete')
    t.same(done.result.toolCalls, ['get_trending_pools'])
    const cancelled = await call(`/agent/job/${body.jobId}`)
    t.equal(cancelled.body.status, 'cancelled')
    t.notOk('result' in cancelled.body)
  })

  top.test('a job that runs past AGENT_JOB_MAX_RUN_MS fails and says so', async (t) => {
    const { body } = await call('/agent/prompt', { body: { prompt: 'price of BTC' } })
    const job = await poll(body.jobId)
    t.equal(job.status, 'failed')
    t.equal(job.error, 'the job ran longer than its limit of 3 s and was stopped')
    t.notOk('result' in job)
    stack.upstreams.behave('/simple/price', 'ok')
  })
})
