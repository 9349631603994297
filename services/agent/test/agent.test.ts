import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { identityHeaders, type JobPaymentOutcome, natsChannels } from '@ats/contracts'
import { createService } from '@ats/service-kit'
import { baseTestEnv, compareSchemaWithDatabase, scrapeMetric, startService, testInfra, testInternalToken } from '@ats/service-kit/testing'
import { connect } from 'nats'
import pg from 'pg'
import t, { type Test } from 'tap'
import { formatUsd } from '../src/runner/orders.ts'
import { agentService } from '../src/service.ts'
import { builtInSkills } from '../src/skills.ts'
import { type StandInRequest, startStandInModel } from '../src/testing/model.ts'
import { eventually, keyHeaders, payerHeaders, startStack, waitForJob } from './helpers.ts'

// The agent service: its settings, routes and database, then the job pipeline with the real
// services its tools call (the offline planner, a language model's tool-calling loop, cancel and
// the run-time limit, the outcome of paid jobs) on one devnet for the file (helpers.ts); each
// test starts its own services.

async function start(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), ...extra }
  const svc = await startService(t, agentService, env)
  const call = async (path: string, headers: Record<string, string> = { [identityHeaders.internalToken]: testInternalToken }) => {
    const res = await fetch(`${svc.url}${path}`, { headers })
    return { status: res.status, body: (await res.json()) as any }
  }
  return { svc, env, call }
}

const builtIns = [
  ['swap-quote', '/swap/quote'],
  ['swap-execute', '/swap/execute'],
  ['portfolio-positions', '/portfolio/positions'],
  ['market-prices', '/market/prices'],
  ['trending-pools', '/market/trending'],
  ['nfts', '/nfts/:address'],
  ['predictions', '/predictions/top'],
  ['bridge-quote', '/bridge/quote'],
  ['automations', '/automations'],
]

t.test('skills: the built-in ones (relative paths by default), then those of EXTERNAL_SKILLS', async (t) => {
  const external = [
    { name: 'weather', url: 'https://skills.example.com/weather' },
    { name: 'news', url: 'http://news.internal:8080/latest' },
  ]
  const { call } = await start(t, { EXTERNAL_SKILLS: JSON.stringify(external) })
  const res = await call('/agent/skills')
  t.equal(res.status, 200)
  t.same(res.body, {
    skills: [...builtIns.map(([name, url]) => ({ name, url, external: false })), ...external.map((s) => ({ ...s, external: true }))],
  })
  t.equal(builtInSkills.length, builtIns.length)
})

t.test('without EXTERNAL_SKILLS (or with it empty) only built-in skills; AGENT_PUBLIC_URL prefixes their paths', async (t) => {
  const { call } = await start(t, { EXTERNAL_SKILLS: '', AGENT_PUBLIC_URL: 'https://api.example.com/' })
  const res = await call('/agent/skills')
  t.equal(res.status, 200)
  t.same(
    res.body.skills,
    builtIns.map(([name, url]) => ({ name, url: `https://api.example.com${url}`, external: false })),
  )
  const empty = await start(t, { EXTERNAL_SKILLS: '[]' })
  t.equal((await empty.call('/agent/skills')).body.skills.length, builtIns.length)
})

t.test('a malformed EXTERNAL_SKILLS stops the start with a message naming it', async (t) => {
  const env = await baseTestEnv(t)
  const cases: Array<[string, RegExp]> = [
    ['not json', /not JSON/],
    ['{"name":"x","url":"https://x.example"}', /JSON array/],
    ['[{"name":"x"}]', /\/0.*url/],
    ['[{"name":"","url":"https://x.example"}]', /\/0\/name/],
    ['[{"name":"x","url":"ftp://x.example"}]', /\/0\/url must be an absolute http\(s\) URL/],
    ['[{"name":"x","url":"https://a.example"},{"name":"x","url":"https://b.example"}]', /"x" is used twice/],
    ['[{"name":"swap-quote","url":"https://a.example"}]', /"swap-quote" is used twice/],
  ]
  for (const [value, detail] of cases) {
    const error = await createService(agentService, { ...env, EXTERNAL_SKILLS: value }).then(
      () => undefined,
      (e: Error) => e,
    )
    t.equal(error?.name, 'StartupError', value)
    t.match(error?.message, /^invalid setting EXTERNAL_SKILLS: must be a JSON array of \{"name", "url"\} objects/, value)
    t.match(error?.message, detail, value)
  }
  await t.rejects(createService(agentService, { ...env, AGENT_PUBLIC_URL: 'api.example.com' }), {
    name: 'StartupError',
    message: /invalid setting AGENT_PUBLIC_URL: must be an absolute http\(s\) URL/,
  })
})

t.test('requests without the internal token answer 401; probes need none', async (t) => {
  const { call } = await start(t)
  const refused: Array<Record<string, string>> = [{}, { [identityHeaders.internalToken]: 'wrong-token-0123456789' }]
  for (const headers of refused) {
    const res = await call('/agent/skills', headers)
    t.equal(res.status, 401)
    t.match(res.body, { error: String })
  }
  t.equal((await call('/health', {})).status, 200)
  t.equal((await call('/ready', {})).status, 200)
})

t.test('threads, messages and jobs round-trip through the generated client', async (t) => {
  const { svc } = await start(t)
  const db = svc.ctx.db
  const thread = await db.thread.create({ data: { id: 'thr_1', ownerId: '0xabc' } })
  await db.message.create({ data: { id: 'msg_1', threadId: thread.id, role: 'user', content: 'hello' } })
  await db.job.create({ data: { id: 'job_1', ownerId: '0xabc', threadId: thread.id, prompt: 'hello' } })
  const loaded = await db.thread.findUniqueOrThrow({ where: { id: 'thr_1' }, include: { messages: true, jobs: true } })
  t.match(loaded.messages, [{ role: 'user', content: 'hello', metadata: null }])
  t.same(loaded.messages[0]?.toolCalls, [], 'toolCalls default to an empty list')
  t.match(loaded.jobs, [{ status: 'pending', prompt: 'hello', result: null, error: null }])
  await db.thread.delete({ where: { id: 'thr_1' } })
  t.equal(await db.job.count(), 0, 'jobs and messages go with their thread')
})

t.test('schema.prisma and the migrated database agree', async (t) => {
  const { env } = await start(t)
  const schema = fileURLToPath(new URL('../prisma/schema.prisma', import.meta.url))
  t.same(await compareSchemaWithDatabase(schema, env.DATABASE_URL!, 'agent'), [])
})

/** Reads a server-sent event stream to its end: each event's id, name and data. */
async function readEvents(url: string, headers: Record<string, string>) {
  const res = await fetch(url, { headers })
  const text = await res.text()
  const events = text
    .split('\n\n')
    .filter((block) => block.includes('data: '))
    .map((block) => {
      const field = (name: string) =>
        block
          .split('\n')
          .find((line) => line.startsWith(`${name}: `))
          ?.slice(name.length + 2)
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
    t.same(
      times,
      [...times].sort((a: number, b: number) => b - a),
      'newest first',
    )
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

interface SseFrame {
  id?: string
  event: string
  data: any
  /** when the client read it (Date.now()) */
  at: number
}

/** Reads a server-sent event stream to its end, noting when each frame arrived. */
async function readFrames(res: Response, onFrame: (frame: SseFrame) => void = () => undefined) {
  const frames: SseFrame[] = []
  const decoder = new TextDecoder()
  let buffer = ''
  for await (const part of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(part, { stream: true })
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const field = (name: string) =>
        block
          .split('\n')
          .find((line) => line.startsWith(`${name}: `))
          ?.slice(name.length + 2)
      const data = field('data')
      if (data === undefined) continue
      const id = field('id')
      const frame: SseFrame = {
        ...(id === undefined ? {} : { id }),
        event: field('event') ?? 'message',
        data: data === '[DONE]' ? data : JSON.parse(data),
        at: Date.now(),
      }
      frames.push(frame)
      onFrame(frame)
    }
  }
  return frames
}

/** The model's tools: "unknown" asks for one that does not exist, "forever" never stops asking, "quietly" asks for none. */
const plan = (prompt: string, round: number) => {
  if (prompt.includes('quietly') || (round > 0 && !prompt.includes('forever'))) return []
  if (prompt.includes('unknown')) return [{ name: 'launch_rocket', arguments: '{}' }]
  const calls = [
    { name: 'get_prices', arguments: JSON.stringify({ symbols: ['ETH'] }) },
    { name: 'quote_swap', arguments: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'ARB', amount: '1' }) },
  ]
  return prompt.includes('narrate') ? { text: 'Let me look at the price and a quote first.', calls } : calls
}
/** The answer: the tools' outputs (the text proves they ran), or a text of many words for "quietly". */
const answer = (prompt: string, outputs: string[]) =>
  prompt.includes('quietly')
    ? 'Markets are calm today and nothing needs doing: the prices are steady, your positions are safe, and no automation is due.'
    : `From the tools: ${outputs.join(' | ')}`

t.test('with an LLM configured, the tool-calling loop runs the tools the model asks for and returns its text', async (t) => {
  // the stand-in holds an answer while `held` is pending, and streams a token every 15 ms
  let held: Promise<void> | undefined
  const model = await startStandInModel({ plan, answer, tokenDelayMs: 15, gate: () => held })
  t.teardown(model.close)
  const stack = await startStack(t, {
    agentEnv: { LLM_BASE_URL: model.url, LLM_API_KEY: 'sk-test-key', LLM_MODEL: 'scripted-1', LLM_MAX_STEPS: '3' },
  })
  const payer = stack.devnet.accounts[1]!.address
  const prompt = (body: unknown) => stack.call('/agent/prompt', { body, headers: payerHeaders(payer) })

  const accepted = await prompt({ prompt: 'How much is ETH, and what would 1 USDC buy in ARB?', context: { locale: 'en-GB' } })
  const job = await waitForJob(stack.call, payer, accepted.body.jobId)
  t.equal(job.status, 'complete', job.error)
  t.same(job.result.toolCalls, ['get_prices', 'quote_swap'])
  t.equal(job.result.steps, 4, 'two tool calls and two model turns')
  t.match(job.result.text, /^From the tools: \{"prices":\{"ETH":\{"price":[0-9.]+/, 'the model saw the prices tool output')
  t.match(job.result.text, /"tokenIn":"USDC","tokenOut":"ARB","amountIn":"1000000"/, 'and the quote, with the amount in base units')

  t.equal(model.requests.length, 2)
  const [firstTurn, secondTurn] = model.requests
  t.equal(firstTurn!.authorization, 'Bearer sk-test-key')
  t.equal(firstTurn!.body.model, 'scripted-1')
  t.same(
    firstTurn!.body.tools.map((tool) => tool.function.name),
    [
      'get_prices',
      'get_trending_pools',
      'quote_swap',
      'swap',
      'get_positions',
      'list_nfts',
      'find_predictions',
      'bridge_quote',
      'create_automation',
      'create_order',
      'list_automations',
      'set_automation_status',
    ],
  )
  for (const tool of firstTurn!.body.tools) t.equal(tool.function.parameters.type, 'object', `${tool.function.name} has a JSON Schema`)
  t.same(
    firstTurn!.body.messages.map((m) => m.role),
    ['system', 'system', 'user'],
  )
  t.match(firstTurn!.body.messages[1]!.content, /"locale":"en-GB"/, 'the context is handed to the model')
  t.same(
    secondTurn!.body.messages.map((m) => m.role),
    ['system', 'system', 'user', 'assistant', 'tool', 'tool'],
  )

  t.test('a follow-up gives the model the thread so far; an unknown tool answers the model an error', async (t) => {
    const follow = await prompt({ prompt: 'unknown tool please', threadId: accepted.body.threadId })
    const second = await waitForJob(stack.call, payer, follow.body.jobId)
    t.equal(second.status, 'complete')
    t.same(second.result.toolCalls, ['launch_rocket'])
    t.match(second.result.text, /no tool named launch_rocket/)
    const firstOfFollowUp = model.requests[2]!.body.messages
    t.same(
      firstOfFollowUp.map((m) => m.role),
      ['system', 'user', 'assistant', 'user'],
    )
    t.equal(firstOfFollowUp[2]!.content, job.result.text, 'the earlier answer is in the history')
  })

  t.test(
    '/v1: ats-agent runs the model with the system messages and sums its usage; ats-planner skips it; a failed job is a 500 not to retry',
    async (t) => {
      const key = keyHeaders('key_v1llm', 'readwrite')
      const chat = (body: unknown) => stack.call('/v1/chat/completions', { body, headers: key })
      const before = model.requests.length
      const answer = await chat({
        model: 'ats-agent',
        messages: [
          { role: 'system', content: 'Answer in French.' },
          { role: 'user', content: 'How much is ETH?' },
        ],
      })
      t.equal(answer.status, 200, JSON.stringify(answer.body))
      t.match(answer.body.choices[0].message.content, /^From the tools: /)
      const turns = model.requests.slice(before)
      t.equal(turns.length, 2)
      t.match(turns[0]!.body.messages[1], { role: 'system', content: 'Instructions from the caller: Answer in French.' })
      // what the model reported, summed over its two turns (3 and 6 messages sent)
      t.same(answer.body.usage, { prompt_tokens: 1003 + 1006, completion_tokens: 14, total_tokens: 2023 })
      t.same(
        answer.body.agent.tool_calls.map((c: any) => c.function.name),
        ['get_prices', 'quote_swap'],
      )

      const planned = await chat({ model: 'ats-planner', messages: [{ role: 'user', content: 'price of ETH' }] })
      t.match(planned.body.choices[0].message.content, /^ETH: \$/)
      t.equal(model.requests.length, before + 2, 'the planner answered without the model')

      const failed = await chat({ model: 'ats-agent', messages: [{ role: 'user', content: 'ask for tools forever' }] })
      t.equal(failed.status, 500)
      t.equal(failed.headers.get('x-should-retry'), 'false', "OpenAI's clients do not retry it")
      t.same(failed.body, {
        error: {
          message: 'the agent could not answer: the model did not reach an answer within 3 steps (LLM_MAX_STEPS)',
          type: 'server_error',
          param: null,
          code: 'job_failed',
        },
      })
    },
  )

  const key = keyHeaders('key_v1stream', 'readwrite')
  const streamChat = async (content: string) => {
    const res = await fetch(`${stack.agent!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...key, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'ats-agent', stream: true, messages: [{ role: 'user', content }] }),
    })
    t.equal(res.status, 200)
    const frames = (await readFrames(res)).filter((f) => f.data !== '[DONE]')
    const texts = frames.filter((f) => f.data.choices[0]?.delta?.content)
    const jobId = frames[0]!.data.id.slice('chatcmpl-'.length)
    const { body } = await stack.call('/portfolio/jobs?limit=100', { headers: key })
    const job = body.jobs.find((j: any) => j.id === jobId)
    return { frames, texts, text: texts.map((f) => f.data.choices[0].delta.content).join(''), job }
  }
  const lastTokenAt = (request: StandInRequest) => request.sent.last!

  t.test('/v1 stream: the first words reach the client before the model has written its last, and add up to the answer', async (t) => {
    const before = model.requests.length
    const { texts, text, job } = await streamChat('quietly: anything to do today?')
    const [turn] = model.requests.slice(before)
    t.equal(model.requests.length, before + 1)
    t.ok(turn!.stream, 'the model was asked to stream')
    t.ok(texts.length > 10, `the text came in pieces (${texts.length})`)
    t.ok(texts[0]!.at < lastTokenAt(turn!), 'the first piece reached the client before the model sent its last token')
    t.equal(job.status, 'complete')
    t.equal(text, job.result.text, "joined, the pieces are the job's text")
    t.match(text, /^Markets are calm today/)
  })

  t.test('/v1 stream: tool calls streamed as deltas still run; the text of the turn before them is part of the answer', async (t) => {
    const { frames, text, job } = await streamChat('narrate: how much is ETH?')
    t.same(job.result.toolCalls, ['get_prices', 'quote_swap'])
    t.match(text, /^Let me look at the price and a quote first\.\n\nFrom the tools: \{"prices":\{"ETH":/)
    t.equal(text, job.result.text)
    const steps = frames.filter((f) => f.data.agent?.step).map((f) => `${f.data.agent.step.tool}:${f.data.agent.step.phase}`)
    t.same(steps, ['get_prices:started', 'get_prices:finished', 'quote_swap:started', 'quote_swap:finished'])
    const firstStep = frames.findIndex((f) => f.data.agent?.step)
    t.ok(
      frames.slice(0, firstStep).some((f) => f.data.choices[0]?.delta?.content),
      "the first turn's text came before the tools ran",
    )
  })

  t.test('events stream: text deltas live, without ids; a stream resumed with Last-Event-ID replays only stored events', async (t) => {
    let release!: () => void
    held = new Promise((resolve) => (release = resolve))
    t.teardown(() => {
      release()
      held = undefined
    })
    const accepted = await prompt({ prompt: 'quietly: anything to do?' })
    const url = `${stack.agent!.url}/agent/job/${accepted.body.jobId}/events`
    let lastId = '0'
    let resumedAfter = ''
    let resumed: Promise<SseFrame[]> | undefined
    const frames = await readFrames(await fetch(url, { headers: payerHeaders(payer) }), (frame) => {
      if (frame.id) lastId = frame.id
      // the stream is open: the model may answer
      release()
      // a stream resumed in the middle of the text, from the last stored event seen
      if (frame.event === 'delta' && !resumed) {
        resumedAfter = lastId
        resumed = fetch(url, { headers: { ...payerHeaders(payer), 'last-event-id': resumedAfter } }).then((res) => readFrames(res))
      }
    })
    const deltas = frames.filter((f) => f.event === 'delta')
    const complete = frames.at(-1)!
    t.match(complete, { event: 'status', data: { status: 'complete' } })
    t.ok(deltas.length > 10, `the text came as deltas (${deltas.length})`)
    t.ok(
      deltas.every((f) => f.id === undefined),
      'deltas have no id',
    )
    t.ok(
      frames.filter((f) => f.event !== 'delta').every((f) => f.id !== undefined),
      'stored events do',
    )
    t.same(
      deltas.map((f) => f.data.offset),
      deltas.map((f) => f.data.offset).sort((a, b) => a - b),
      'in order',
    )
    t.equal(deltas.map((f) => f.data.text).join(''), complete.data.result.text, "joined, the deltas are the job's text")
    t.ok(
      deltas[0]!.data.offset === 0 &&
        deltas.every((f, i) => i === 0 || f.data.offset === deltas[i - 1]!.data.offset + deltas[i - 1]!.data.text.length),
      'each starts where the one before ended',
    )

    const again = await resumed!
    t.ok(again.length > 0 && again.every((f) => f.event !== 'delta' && f.id !== undefined), 'the resumed stream has stored events only')
    t.equal(again.at(-1)!.data.result.text, complete.data.result.text, 'and the text in its complete event')
    t.ok(
      again.every((f) => Number(f.id) > Number(resumedAfter)),
      'after the id it gave',
    )

    const replay = await fetch(url, { headers: payerHeaders(payer) }).then((res) => readFrames(res))
    t.same(
      replay.map((f) => f.event),
      frames.filter((f) => f.event !== 'delta').map((f) => f.event),
      'read again later: the same stored events, no deltas',
    )
  })
})

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
  let worker: { url: string }

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
    worker = await startService(top, agentService, {
      ...stack.agentEnv,
      AGENT_ROLE: 'worker',
      AGENT_WORKER_CONCURRENCY: '1',
      AGENT_JOB_MAX_RUN_MS: '3000',
      AGENT_TOOL_TIMEOUT_MS: '20000',
    })
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
    // running, unacknowledged: in the queue lag until it ends
    await eventually('the running job in ats_agent_jobs_pending', async () =>
      (await scrapeMetric(worker.url, 'ats_agent_jobs_pending'))[''] === 1 ? true : undefined,
    )
    const job = await poll(body.jobId)
    t.equal(job.status, 'failed')
    t.equal(job.error, 'the job ran longer than its limit of 3 s and was stopped')
    t.notOk('result' in job)
    stack.upstreams.behave('/simple/price', 'ok')
    await eventually('an empty queue in ats_agent_jobs_pending', async () =>
      (await scrapeMetric(worker.url, 'ats_agent_jobs_pending'))[''] === 0 ? true : undefined,
    )
  })

  top.test('/metrics counts the jobs each process created or ended, by status', async (t) => {
    // the API process made the five jobs and cancelled two; the worker ended the rest
    t.same(await scrapeMetric(api.url, 'ats_agent_jobs_total'), { pending: 5, complete: 0, failed: 0, cancelled: 2 })
    t.same(await scrapeMetric(worker.url, 'ats_agent_jobs_total'), { pending: 0, complete: 2, failed: 1, cancelled: 0 })
    t.same(await scrapeMetric(api.url, 'ats_agent_jobs_pending'), {}, "the queue lag is the workers' to report")
  })
})

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
    t.match(await outcomeOf(jobId), [
      { jobId, payer, nonce, outcome: 'void', status: 'cancelled', reason: 'cancelled before it started', at: Number },
    ])
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
    await startService(top, agentService, {
      ...stack.agentEnv,
      AGENT_ROLE: 'worker',
      AGENT_WORKER_CONCURRENCY: '1',
      AGENT_TOOL_TIMEOUT_MS: '20000',
    })
  })

  top.test('complete: charge; the job shows its payment pending until the ledger settles it', async (t) => {
    const { jobId, nonce } = await paidPrompt('quote 1 USDC for ARB on camelot')
    const job = await finished(jobId)
    t.equal(job.status, 'complete')
    t.match(await outcomeOf(jobId), [{ jobId, payer, nonce, outcome: 'charge', status: 'complete' }])
    t.notOk((await outcomeOf(jobId))[0]!.reason, 'a charge has no reason')
    t.same(job.payment, { state: 'pending' }, 'no charge is recorded here (no gateway): pending')
  })

  top.test("a paid job's 202 names its deadline; one whose payment expires within the margin is voided, never run", async (t) => {
    const validBeforeIn = async (seconds: number | string) => {
      const validBefore = typeof seconds === 'number' ? String(Math.floor(Date.now() / 1000) + seconds) : seconds
      const nonce = `0x${randomBytes(32).toString('hex')}`
      const headers = { [identityHeaders.payment]: `${payer}:${nonce}`, [identityHeaders.paymentValidBefore]: validBefore }
      // a prompt no tool serves: the prices the next tests make fail are not cached by it
      const res = await call('/agent/prompt', { body: { prompt: 'what can you do' }, headers })
      t.equal(res.status, 202)
      return { ...res.body, validBefore: Number(validBefore) }
    }
    // AGENT_JOB_PAYMENT_MARGIN_SECONDS is 60 by default
    const roomy = await validBeforeIn(600)
    t.equal(roomy.deadline, (roomy.validBefore - 60) * 1000)
    t.equal((await finished(roomy.jobId)).status, 'complete')

    const late = await validBeforeIn(30)
    t.equal(late.deadline, (late.validBefore - 60) * 1000, 'already past')
    const voided = await finished(late.jobId)
    t.equal(voided.status, 'failed')
    t.match(voided.error, /^the job was not started: the payment that bought it expires at \S+ \(validBefore\), too soon to settle it/)
    t.notOk(voided.result)
    t.match(await outcomeOf(late.jobId), [{ jobId: late.jobId, outcome: 'void', status: 'failed', reason: voided.error }])

    const malformed = await validBeforeIn('soon')
    t.notOk('deadline' in malformed, 'a malformed validBefore gives no deadline')
    t.equal((await finished(malformed.jobId)).status, 'complete')
  })

  top.test("failed because a tool failed through a fault of ours: void with the job's error", async (t) => {
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
    t.ok(
      [...all.values()].every((list) => list.length === 1),
      'no job has two outcomes in the stream',
    )
    t.equal(all.size, 8, 'one outcome per paid job, none for the unpaid one')

    // GET /portfolio/jobs: a key bound to the payer's wallet sees the payments of its paid jobs
    const listed = await call('/portfolio/jobs', { headers: keyHeaders('key_reader', 'readonly', payer) })
    t.equal(listed.status, 200)
    const voided = listed.body.jobs.filter((j: any) => j.payment?.state === 'voided')
    t.ok(voided.length >= 2, 'the voided ones show voided with their reason')
    t.ok(voided.every((j: any) => typeof j.payment.reason === 'string' && j.payment.reason.length > 0))
    t.notOk('payment' in listed.body.jobs.find((j: any) => j.id === unpaidJob), 'an unpaid job has none')
  })
})
