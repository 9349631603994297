import { randomBytes } from 'node:crypto'
import { identityHeaders, natsChannels, type JobPaymentOutcome } from '@ats/contracts'
import { startService, testInfra } from '@ats/service-kit/testing'
import { connect } from 'nats'
import pg from 'pg'
import t from 'tap'
import { agentService } from '../src/service.ts'
import { eventually, keyHeaders, payerHeaders, startStack } from './helpers.ts'

/**
 * Paid jobs report the outcome of their payment to admin's ledger through the payments stream:
 * charge when the job completes or is cancelled while running, void (with the reason) when it
 * fails or is cancelled before it started. The job answers show the payment as the ledger has it.
 */
t.test('the outcome of each paid job is published once, with the reason of a void', async (top) => {
  // prices from "CoinGecko" and trending pools from "GeckoTerminal" (local stand-ins a test can break)
  const stack = await startStack(top, {
    noAgent: true,
    marketEnv: { PRICE_SOURCE: 'coingecko', TRENDING_SOURCE: 'geckoterminal', SOURCE_TIMEOUT_MS: '20000' },
  })
  const api = await startService(top, agentService, { ...stack.agentEnv, AGENT_ROLE: 'api' })
  const payer = stack.devnet.accounts[1]!.address.toLowerCase()
  const { stream, jobOutcome } = natsChannels(stack.env.NATS_NAMESPACE!).admin.payments
  const nc = await connect({ servers: (await testInfra()).natsUrl })
  top.teardown(() => nc.close())
  const jsm = await nc.jetstreamManager()

  const call = async (path: string, init: { method?: string; body?: unknown; headers?: Record<string, string> } = {}) => {
    const res = await fetch(`${api.url}${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: { ...payerHeaders(payer), ...init.headers, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    })
    return { status: res.status, headers: res.headers, body: (await res.json()) as any }
  }
  /** a paid prompt, as the gateway forwards it: with the verified payment */
  const paidPrompt = async (prompt: string) => {
    const nonce = `0x${randomBytes(32).toString('hex')}`
    const res = await call('/agent/prompt', { body: { prompt }, headers: { [identityHeaders.payment]: `${payer}:${nonce}` } })
    top.equal(res.status, 202)
    top.equal(res.headers.get('x-ats-job-id'), res.body.jobId, 'the 202 names the job in x-ats-job-id, for the gateway')
    return { jobId: res.body.jobId as string, nonce }
  }
  const finished = (jobId: string, until = ['complete', 'failed', 'cancelled']) =>
    eventually(`job ${jobId} finished`, async () => {
      const job = (await call(`/agent/job/${jobId}`)).body
      return until.includes(job.status) ? job : undefined
    })
  /** every outcome in the payments stream, by job id (a job published twice would show twice) */
  const outcomes = async () => {
    const info = await jsm.streams.info(stream)
    const found = new Map<string, JobPaymentOutcome[]>()
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const m = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined)
      if (m?.subject !== jobOutcome.subject) continue
      const outcome = jobOutcome.message.decode(m.data)
      found.set(outcome.jobId, [...(found.get(outcome.jobId) ?? []), outcome])
    }
    return found
  }
  let unpaidJob = ''
  const outcomeOf = (jobId: string) => eventually(`the outcome of ${jobId} in the stream`, async () => (await outcomes()).get(jobId))

  top.test('cancelled before a worker started it: void, "cancelled before it started"; the job shows it voided', async (t) => {
    const { jobId, nonce } = await paidPrompt('price of ETH')
    t.equal((await call(`/agent/job/${jobId}`, { method: 'DELETE' })).status, 200)
    t.match(await outcomeOf(jobId), [{ jobId, payer, nonce, outcome: 'void', status: 'cancelled', reason: 'cancelled before it started', at: Number }])
    // admin stored the outcome: the job answer shows the payment voided, though no charge was recorded
    const job = await eventually('the job shows its payment voided', async () => {
      const body = (await call(`/agent/job/${jobId}`)).body
      return body.payment?.state === 'voided' ? body : undefined
    })
    t.same(job.payment, { state: 'voided', reason: 'cancelled before it started' })
    // an unpaid job has no payment, and no outcome
    const unpaid = await call('/agent/prompt', { body: { prompt: 'price of ETH' } })
    t.equal((await call(`/agent/job/${unpaid.body.jobId}`, { method: 'DELETE' })).status, 200)
    t.notOk('payment' in (await call(`/agent/job/${unpaid.body.jobId}`)).body)
    unpaidJob = unpaid.body.jobId

    // workers for the rest of the file: one job at a time
    await startService(top, agentService, { ...stack.agentEnv, AGENT_ROLE: 'worker', AGENT_WORKER_CONCURRENCY: '1', AGENT_TOOL_TIMEOUT_MS: '20000' })
  })

  top.test('complete: charge; the job shows its payment pending until the ledger settles it', async (t) => {
    const { jobId, nonce } = await paidPrompt('quote 1 USDC for ARB on camelot')
    const job = await finished(jobId)
    t.equal(job.status, 'complete')
    t.match(await outcomeOf(jobId), [{ jobId, payer, nonce, outcome: 'charge', status: 'complete' }])
    t.notOk((await outcomeOf(jobId))[0]!.reason, 'a charge has no reason')
    t.same(job.payment, { state: 'pending' }, 'no charge is recorded here (no gateway): pending')
  })

  top.test('failed because a tool failed through a fault of ours: void with the job\'s error', async (t) => {
    stack.upstreams.behave('/simple/price', 500)
    const { jobId } = await paidPrompt('price of ETH')
    const job = await finished(jobId)
    t.equal(job.status, 'failed')
    t.match(job.error, /^the get_prices step failed: /)
    t.match(await outcomeOf(jobId), [{ jobId, outcome: 'void', status: 'failed', reason: job.error }])
    stack.upstreams.behave('/simple/price', 'ok')
  })

  top.test('cancelled while running: charge (work was done)', async (t) => {
    stack.upstreams.behave('/trending_pools', 'hang')
    const { jobId } = await paidPrompt('show trending pools')
    await eventually('the tool to reach the upstream', async () => (stack.upstreams.calls('/trending_pools') > 0 ? true : undefined))
    t.equal((await call(`/agent/job/${jobId}`)).body.status, 'running')
    t.equal((await call(`/agent/job/${jobId}`, { method: 'DELETE' })).status, 200)
    t.match(await outcomeOf(jobId), [{ jobId, outcome: 'charge', status: 'cancelled' }])
    stack.upstreams.behave('/trending_pools', 'ok')
  })

  top.test('an outcome left unpublished (the process died after the commit) is published by the sweep; each job once', async (t) => {
    // a finished paid job whose outcome never reached the stream, as a process killed between the two leaves it
    const db = new pg.Client({ connectionString: stack.env.DATABASE_URL, options: '-c search_path=agent' })
    await db.connect()
    t.teardown(() => db.end())
    const jobId = `job_${randomBytes(12).toString('base64url')}`
    const nonce = `0x${randomBytes(32).toString('hex')}`
    const thread = `thr_${randomBytes(12).toString('base64url')}`
    await db.query(`INSERT INTO threads (id, owner_id, updated_at) VALUES ($1, $2, now())`, [thread, payer])
    await db.query(
      `INSERT INTO jobs (id, owner_id, thread_id, status, prompt, error, payment, payment_outcome, payment_reason, created_at, updated_at)
       VALUES ($1, $2, $3, 'failed', 'price of ETH', 'the model failed', $4, 'void', 'the model failed', now() - interval '1 minute', now() - interval '30 seconds')`,
      [jobId, payer, thread, `${payer}:${nonce}`],
    )
    t.match(await outcomeOf(jobId), [{ jobId, payer, nonce, outcome: 'void', status: 'failed', reason: 'the model failed' }])
    const published = await eventually('marked published', async () => {
      const { rows } = await db.query('SELECT outcome_published_at FROM jobs WHERE id = $1', [jobId])
      return rows[0].outcome_published_at ?? undefined
    })
    t.ok(published instanceof Date)

    const all = await outcomes()
    t.ok([...all.values()].every((list) => list.length === 1), 'no job has two outcomes in the stream')
    t.equal(all.size, 5, 'one outcome per paid job, none for the unpaid one')

    // GET /portfolio/jobs: a key bound to the payer's wallet sees the payments of its paid jobs
    const listed = await call('/portfolio/jobs', { headers: keyHeaders('key_reader', 'readonly', payer) })
    t.equal(listed.status, 200)
    const voided = listed.body.jobs.filter((j: any) => j.payment?.state === 'voided')
    t.ok(voided.length >= 2, 'the voided ones show voided with their reason')
    t.ok(voided.every((j: any) => typeof j.payment.reason === 'string' && j.payment.reason.length > 0))
    t.notOk('payment' in listed.body.jobs.find((j: any) => j.id === unpaidJob), 'an unpaid job has none')
  })
})
