import t from 'tap'
import { formatUsd } from '../src/runner/planner.ts'
import { keyHeaders, payerHeaders, startStack, waitForJob } from './helpers.ts'

/** Reads a server-sent event stream to its end: each event's id, name and data. */
async function readEvents(url: string, headers: Record<string, string>) {
  const res = await fetch(url, { headers })
  const text = await res.text()
  const events = text
    .split('\n\n')
    .filter((block) => block.includes('data: '))
    .map((block) => {
      const field = (name: string) => block.split('\n').find((line) => line.startsWith(`${name}: `))?.slice(name.length + 2)
      return { id: Number(field('id')), event: field('event'), data: JSON.parse(field('data')!) }
    })
  return { status: res.status, contentType: res.headers.get('content-type'), events }
}

t.test('the job pipeline, with the offline planner and the real services its tools call', async (t) => {
  const stack = await startStack(t)
  const { call, devnet } = stack
  const payer = devnet.accounts[1]!.address
  const other = devnet.accounts[2]!.address
  const prompt = (body: unknown, who = payer) => call('/agent/prompt', { body, headers: payerHeaders(who) })
  const marketPrices = async () => {
    const { callEndpoint } = await import('@ats/service-kit')
    const { connect } = await import('nats')
    const { natsChannels } = await import('@ats/contracts')
    const nc = await connect({ servers: stack.env.NATS_URL })
    try {
      return (await callEndpoint(nc, natsChannels(stack.env.NATS_NAMESPACE!).market.prices, {})).prices
    } finally {
      await nc.close()
    }
  }

  let first: { jobId: string; threadId: string }
  t.test('a price question: 202, then complete with the prices tool and the live devnet price in the text', async (t) => {
    const accepted = await prompt({ prompt: "What's the price of ETH?" })
    t.equal(accepted.status, 202)
    t.match(accepted.body, { jobId: /^job_/, threadId: /^thr_/, status: 'pending' })
    first = accepted.body
    const job = await waitForJob(call, payer, first.jobId)
    t.equal(job.status, 'complete', job.error)
    t.same(job.result.toolCalls, ['get_prices'])
    t.equal(job.result.steps, 2, 'one tool call and the answer')
    t.same(job.result.transactions, [])
    t.equal(job.prompt, "What's the price of ETH?")
    t.equal(job.threadId, first.threadId)
    const prices = await marketPrices()
    t.ok(job.result.text.includes(formatUsd(prices.ETH!.price)), `"${job.result.text}" holds ${formatUsd(prices.ETH!.price)}`)
  })

  t.test('a follow-up in the same thread uses the earlier messages', async (t) => {
    const accepted = await prompt({ prompt: 'and BTC?', threadId: first.threadId })
    t.equal(accepted.status, 202)
    t.equal(accepted.body.threadId, first.threadId)
    const job = await waitForJob(call, payer, accepted.body.jobId)
    t.equal(job.status, 'complete')
    t.same(job.result.toolCalls, ['get_prices'])
    const prices = await marketPrices()
    t.ok(job.result.text.includes(formatUsd(prices.BTC!.price)), job.result.text)
    const thread = await call(`/agent/thread/${first.threadId}`, { headers: payerHeaders(payer) })
    t.equal(thread.status, 200)
    t.same(
      thread.body.messages.map((m: any) => [m.role, m.metadata.jobId]),
      [
        ['user', first.jobId],
        ['assistant', first.jobId],
        ['user', accepted.body.jobId],
        ['assistant', accepted.body.jobId],
      ],
    )
    t.same(thread.body.messages[1].toolCalls, ['get_prices'])
    t.notOk('toolCalls' in thread.body.messages[0], 'user messages carry no toolCalls')
    t.equal(thread.body.messages[3].content, job.result.text)
  })

  t.test("another payer's job and thread answer 404, as a missing one does", async (t) => {
    for (const path of [`/agent/job/${first.jobId}`, `/agent/thread/${first.threadId}`, `/agent/job/${first.jobId}/events`]) {
      const res = await call(path, { headers: payerHeaders(other) })
      t.equal(res.status, 404, path)
      t.match(res.body.error, /not found/)
    }
    t.equal((await call('/agent/job/job_missing', { headers: payerHeaders(payer) })).status, 404)
    const post = await prompt({ prompt: 'price of ARB', threadId: first.threadId }, other)
    t.equal(post.status, 404, 'cannot post into the thread')
    t.match(post.body.error, /thread .* not found/)
    t.equal((await call(`/agent/job/${first.jobId}`, { method: 'DELETE', headers: payerHeaders(other) })).status, 404)
  })

  t.test('bad prompts get 400 saying why; an unknown thread 404', async (t) => {
    const cases: Array<[unknown, RegExp]> = [
      [{ prompt: 'x'.repeat(4001) }, /prompt.*4000/],
      [{}, /prompt/],
      [{ prompt: '' }, /prompt/],
      [{ prompt: 42 }, /prompt/],
      [{ prompt: 'hi', context: 'nope' }, /context/],
      [{ prompt: 'hi', context: { blob: 'x'.repeat(17_000) } }, /context.*16384/],
      [{ prompt: 'hi', extra: 1 }, /extra|additional/],
    ]
    for (const [body, message] of cases) {
      const res = await prompt(body)
      t.equal(res.status, 400, JSON.stringify(body).slice(0, 60))
      t.match(res.body.error, message)
    }
    t.equal((await prompt({ prompt: 'x'.repeat(4000) })).status, 202, 'exactly 4000 characters is fine')
    const unknown = await prompt({ prompt: 'price of ETH', threadId: 'thr_nope' })
    t.equal(unknown.status, 404)
    t.match(unknown.body.error, /thread thr_nope not found/)
  })

  t.test('anything else gets "I can\'t do that yet" with what it can do', async (t) => {
    const accepted = await prompt({ prompt: 'write me a poem about the sea' })
    const job = await waitForJob(call, payer, accepted.body.jobId)
    t.equal(job.status, 'complete')
    t.match(job.result.text, /^I can't do that yet/)
    t.same(job.result.toolCalls, [])
    t.equal(job.result.steps, 1)
  })

  t.test('everyday requests run their tool against the real services and answer with its numbers', async (t) => {
    const holder = devnet.accounts[0]!.address
    const cases: Array<[string, string[], RegExp]> = [
      ['quote 1 USDC for ARB on camelot', ['quote_swap'], /^1 USDC → [0-9.]+ ARB on camelot \(route USDC → ARB/],
      ['show trending pools', ['get_trending_pools'], /^Trending pools by 24h volume:\n1\. /],
      ['prediction markets about bitcoin', ['find_predictions'], /^Prediction markets about bitcoin:\n- .*[Bb]itcoin.*%/],
      [`NFTs of ${holder}`, ['list_nfts'], new RegExp(`^${holder} owns [0-9]+ NFTs?: `)],
      ['bridge 100 USDC to Base', ['bridge_quote'], /^Bridging 100 USDC to Base via .*: about 99\.[0-9]+ USDC arrives/],
      ['show my positions', ['get_positions'], new RegExp(`^Positions of ${payer}:\nAave: collateral \\$`)],
    ]
    for (const [text, tools, answer] of cases) {
      const job = await waitForJob(call, payer, (await prompt({ prompt: text })).body.jobId)
      t.equal(job.status, 'complete', text)
      t.same(job.result.toolCalls, tools, text)
      t.match(job.result.text, answer, text)
    }
    // no automation service runs here: a tool failing through a fault of ours fails the job (a
    // paid job's payment is then voided) rather than completing with an apology
    const down = await waitForJob(call, payer, (await prompt({ prompt: 'buy 1 USDC of ARB every hour' })).body.jobId)
    t.match(down, { status: 'failed', error: 'the create_automation step failed: the automation service is not available right now' })
    t.notOk('result' in down)
  })

  t.test('the events stream: pending, running, the step, complete; Last-Event-ID resumes without repeats', async (t) => {
    const accepted = await prompt({ prompt: 'price of LINK' })
    const url = `${stack.agent!.url}/agent/job/${accepted.body.jobId}/events`
    const all = await readEvents(url, payerHeaders(payer))
    t.equal(all.status, 200)
    t.match(all.contentType, /^text\/event-stream/)
    t.same(
      all.events.map((e) => (e.event === 'status' ? e.data.status : `${e.data.tool}:${e.data.phase}`)),
      ['pending', 'running', 'get_prices:started', 'get_prices:finished', 'complete'],
    )
    t.same(
      all.events.map((e) => e.id),
      [1, 2, 3, 4, 5],
    )
    t.match(all.events[4]!.data.result, { toolCalls: ['get_prices'], text: /LINK/ })
    const resumed = await readEvents(url, { ...payerHeaders(payer), 'last-event-id': '2' })
    t.same(
      resumed.events.map((e) => e.id),
      [3, 4, 5],
      'only what was missed',
    )
    t.same(resumed.events, all.events.slice(2))
    const after = await readEvents(url, { ...payerHeaders(payer), 'last-event-id': '5' })
    t.same(after.events, [], 'a finished job with nothing missed ends at once')
  })

  t.test('GET /portfolio/jobs: the paid jobs of the wallet bound to the key, newest first, with prompt', async (t) => {
    const bound = await call('/portfolio/jobs', { headers: keyHeaders('key_reader', 'readonly', payer) })
    t.equal(bound.status, 200)
    t.ok(bound.body.jobs.length >= 5)
    t.equal(bound.body.jobs.at(-1).id, first.jobId, 'oldest last')
    t.equal(bound.body.jobs.at(-1).prompt, "What's the price of ETH?")
    const times = bound.body.jobs.map((j: any) => j.createdAt)
    t.same(times, [...times].sort((a: number, b: number) => b - a), 'newest first')
    const two = await call('/portfolio/jobs?limit=2', { headers: keyHeaders('key_reader', 'readonly', payer) })
    t.equal(two.body.jobs.length, 2)
    t.same(two.body.jobs, bound.body.jobs.slice(0, 2))
    const capped = await call('/portfolio/jobs?limit=500', { headers: keyHeaders('key_reader', 'readonly', payer) })
    t.equal(capped.status, 200, 'over 100 is capped, not refused')
    t.equal(capped.body.jobs.length, bound.body.jobs.length)
    for (const bad of ['abc', '0', '-1', '1.5']) {
      const res = await call(`/portfolio/jobs?limit=${bad}`, { headers: keyHeaders('key_reader') })
      t.equal(res.status, 400, bad)
      t.match(res.body.error, /limit/)
    }
    const unbound = await call('/portfolio/jobs', { headers: keyHeaders('key_other') })
    t.same(unbound.body.jobs, [], "a key without a wallet sees no payer's jobs")
    const otherWallet = await call('/portfolio/jobs', { headers: keyHeaders('key_other', 'readonly', other) })
    t.same(otherWallet.body.jobs, [])
  })
})
