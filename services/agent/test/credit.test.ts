import { randomBytes } from 'node:crypto'
import { creditHeaders, type CreditUsage, identityHeaders, natsChannels } from '@ats/contracts'
import { createService } from '@ats/service-kit'
import { baseTestEnv, eventually, startService, testInfra, testInternalToken } from '@ats/service-kit/testing'
import { connect, type JetStreamManager } from 'nats'
import t, { type Test } from 'tap'
import { costOf, createPrices, modelPricesProblem, outputTokensWithin } from '../src/credit/prices.ts'
import { agentService } from '../src/service.ts'
import { type StandInOptions, startStandInModel } from '../src/testing/model.ts'

// Metered work paid by prepaid credit: the gateway holds the most a /v1 completion or an agent job
// may cost and names the hold in headers; the agent charges the work's tokens at its model's
// prices (plus its tool calls), at most the hold, shows it in the answer, and reports it once on
// the credit stream (CreditUsage, the hold id as message id). The language model is the local
// stand-in, which reports 1000 + (messages sent) prompt tokens and 7 completion tokens a turn.

const prices = {
  AGENT_CREDIT_MODEL_PRICES: JSON.stringify({ 'ats-agent': { input: 2_000_000, output: 10_000_000 } }),
  AGENT_CREDIT_INPUT_PRICE_PER_MTOK: '1000000',
  AGENT_CREDIT_OUTPUT_PRICE_PER_MTOK: '4000000',
  AGENT_CREDIT_TOOL_CALL_PRICE: '500',
}
/** ats-agent's prices above, rounded up once, plus 500 a tool call */
const agentCost = (input: number, output: number, toolCalls = 0) =>
  BigInt(Math.ceil((input * 2_000_000 + output * 10_000_000) / 1_000_000) + 500 * toolCalls)

t.test(
  'the cost of work: tokens at the model price per 1M (a default for unlisted models), rounded up once, plus tool calls',
  async (t) => {
    const p = createPrices({ modelPrices: prices.AGENT_CREDIT_MODEL_PRICES, input: 1_000_000, output: 4_000_000, toolCall: 500 })
    t.equal(costOf(p, { model: 'ats-agent', inputTokens: 1002, outputTokens: 7, toolCalls: 0 }), 2074n)
    t.equal(
      costOf(p, { model: 'ats-agent', inputTokens: 1, outputTokens: 0, toolCalls: 2 }),
      1002n,
      'a token at 2 base units, 2 tool calls',
    )
    const cheap = createPrices({ modelPrices: '{}', input: 300_000, output: 0, toolCall: 0 })
    t.equal(costOf(cheap, { model: 'm', inputTokens: 1, outputTokens: 0, toolCalls: 0 }), 1n, '0.3 base units round up to 1')
    t.equal(costOf(cheap, { model: 'm', inputTokens: 2, outputTokens: 5, toolCalls: 0 }), 1n, 'rounded once: 0.6 is 1, not 2')
    t.equal(costOf(cheap, { model: 'm', inputTokens: 4, outputTokens: 0, toolCalls: 0 }), 2n)
    t.equal(costOf(p, { model: 'ats-planner', inputTokens: 1000, outputTokens: 1000, toolCalls: 0 }), 5000n, 'unlisted: the default')
    t.equal(costOf(p, { model: 'ats-planner', inputTokens: 0, outputTokens: 0, toolCalls: 0 }), 0n)
    // the output allowance never lets a turn's cost pass the hold, whatever the numbers
    for (const hold of [1n, 999n, 2074n, 123_457n, 10n ** 12n]) {
      for (const soFar of [
        { model: 'ats-agent', inputTokens: 0, outputTokens: 0, toolCalls: 0 },
        { model: 'ats-agent', inputTokens: 777, outputTokens: 33, toolCalls: 1 },
        { model: 'other', inputTokens: 5, outputTokens: 1, toolCalls: 0 },
      ]) {
        const allowed = outputTokensWithin(p, hold, soFar, 321)!
        const spent = (out: number) => costOf(p, { ...soFar, inputTokens: soFar.inputTokens + 321, outputTokens: soFar.outputTokens + out })
        if (allowed > 0) t.ok(spent(allowed) <= hold && spent(allowed + 1) > hold, `hold ${hold}: ${allowed} tokens, and not one more`)
        else t.ok(spent(1) > hold, `hold ${hold}: no token fits`)
      }
    }
    const free = createPrices({ modelPrices: '{}', input: 1, output: 0, toolCall: 0 })
    t.equal(
      outputTokensWithin(free, 5n, { model: 'x', inputTokens: 0, outputTokens: 0, toolCalls: 0 }, 1),
      undefined,
      'free output: no cap',
    )
  },
)

t.test('a malformed AGENT_CREDIT_MODEL_PRICES stops the start with a message naming it', async (t) => {
  t.match(modelPricesProblem('{"ats-agent": {"input": 1}}'), /must be a JSON object of model: \{"input", "output"\}.*output/)
  t.match(modelPricesProblem('nope'), /not JSON/)
  t.equal(modelPricesProblem('{"m": {"input": 0, "output": 15000000}}'), undefined)
  const env = { ...(await baseTestEnv(t)), AGENT_CREDIT_MODEL_PRICES: '{"ats-agent": {"input": -1, "output": 1}}' }
  await t.rejects(createService(agentService, env), /AGENT_CREDIT_MODEL_PRICES/)
})

/** The agent with the stand-in model and the prices above; `send` speaks as the gateway for a credit-paid wallet. */
async function startMetered(t: Test, options: StandInOptions = {}, agentEnv: NodeJS.ProcessEnv = {}) {
  const model = await startStandInModel(options)
  t.teardown(model.close)
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), ...prices, LLM_BASE_URL: model.url, LLM_MODEL: 'scripted-1', ...agentEnv }
  const agent = await startService(t, agentService, env)
  const wallet = `0x${randomBytes(20).toString('hex')}`
  const nc = await connect({ servers: (await testInfra()).natsUrl })
  t.teardown(() => nc.close())
  const credit = natsChannels(env.NATS_NAMESPACE!).admin.credit
  const jsm = await nc.jetstreamManager()

  /** a request of `wallet` paid by `hold` (a new hold id unless given), as the gateway forwards it */
  const send = async (path: string, body: unknown, { hold = newHold(), amount = '1000000' } = {}) => {
    const res = await fetch(`${agent.url}${path}`, {
      method: 'POST',
      headers: {
        [identityHeaders.internalToken]: testInternalToken,
        [identityHeaders.ownerId]: wallet,
        [creditHeaders.wallet]: wallet,
        [creditHeaders.hold]: hold,
        [creditHeaders.holdAmount]: amount,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    const text = await res.text()
    return { hold, status: res.status, headers: res.headers, text, body: text.startsWith('{') ? (JSON.parse(text) as any) : undefined }
  }
  /** a paid route read back as the payer (no hold: reads are not metered) */
  const read = async (path: string) => {
    const res = await fetch(`${agent.url}${path}`, {
      headers: { [identityHeaders.internalToken]: testInternalToken, [identityHeaders.ownerId]: wallet, [creditHeaders.wallet]: wallet },
    })
    return (await res.json()) as any
  }
  const cancel = (jobId: string) =>
    fetch(`${agent.url}/agent/job/${jobId}`, {
      method: 'DELETE',
      headers: { [identityHeaders.internalToken]: testInternalToken, [identityHeaders.ownerId]: wallet, [creditHeaders.wallet]: wallet },
    })
  return { model, agent, env, wallet, send, read, cancel, reports: () => usageReports(jsm, credit.stream, credit.usage) }
}

const newHold = () => `req-${randomBytes(8).toString('hex')}`

/** Every CreditUsage in the credit stream, by hold id, with the message id it was stored under. */
async function usageReports(jsm: JetStreamManager, stream: string, usage: ReturnType<typeof natsChannels>['admin']['credit']['usage']) {
  const found = new Map<string, Array<CreditUsage & { msgId: string | undefined }>>()
  const info = await jsm.streams.info(stream).catch(() => undefined)
  if (!info || info.state.messages === 0) return found
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined)
    if (m?.subject !== usage.subject) continue
    const report = usage.message.decode(m.data)
    found.set(report.hold, [...(found.get(report.hold) ?? []), { ...report, msgId: m.header?.get('Nats-Msg-Id') }])
  }
  return found
}

const reportOf = (reports: () => ReturnType<typeof usageReports>, hold: string) =>
  eventually(`the usage report of ${hold}`, async () => (await reports()).get(hold))

t.test('/v1 paid by a credit hold', async (top) => {
  const m = await startMetered(top)
  const chat = { model: 'ats-agent', messages: [{ role: 'user', content: 'hello there' }] }

  top.test("a chat completion: usage with ats_charged (its tokens at the model's prices) and ATS-Charged; one report", async (t) => {
    const res = await m.send('/v1/chat/completions', chat)
    t.equal(res.status, 200, res.text)
    const { usage } = res.body
    t.equal(usage.prompt_tokens, 1002, "the model's own count: the system prompt and the user message")
    t.equal(usage.completion_tokens, 7)
    const cost = agentCost(1002, 7)
    t.equal(usage.ats_charged, String(cost))
    t.equal(res.headers.get('ats-charged'), String(cost))
    t.match(await reportOf(m.reports, res.hold), [
      {
        hold: res.hold,
        msgId: res.hold,
        wallet: m.wallet,
        amount: String(cost),
        outcome: 'complete',
        usage: { model: 'ats-agent', inputTokens: 1002, outputTokens: 7, steps: 1 },
        at: Number,
      },
    ])
  })

  top.test(
    'streamed: the finish chunk carries usage with ats_charged; so do the include_usage chunk, messages and responses',
    async (t) => {
      const cost = String(agentCost(1002, 7))
      const streamed = await m.send('/v1/chat/completions', { ...chat, stream: true, stream_options: { include_usage: true } })
      const chunks = streamed.text
        .split('\n\n')
        .filter((e) => e.startsWith('data: {'))
        .map((e) => JSON.parse(e.slice(6)))
      const finish = chunks.find((c) => c.choices[0]?.finish_reason === 'stop')
      t.match(finish.usage, { prompt_tokens: 1002, completion_tokens: 7, ats_charged: cost })
      t.match(chunks.at(-1), { choices: [], usage: { ats_charged: cost } })
      t.match(await reportOf(m.reports, streamed.hold), [{ amount: cost, outcome: 'complete' }])

      const message = await m.send('/v1/messages', { model: 'ats-agent', max_tokens: 100, messages: chat.messages, stream: true })
      const delta = message.text
        .split('\n\n')
        .find((e) => e.startsWith('event: message_delta'))!
        .split('\ndata: ')[1]!
      t.match(JSON.parse(delta).usage, { input_tokens: 1002, output_tokens: 7, ats_charged: cost })

      const response = await m.send('/v1/responses', { model: 'ats-agent', input: 'hello there' })
      t.match(response.body.usage, { input_tokens: 1002, output_tokens: 7, ats_charged: cost })
      t.equal(response.headers.get('ats-charged'), cost)
    },
  )

  top.test('the same hold sent twice is reported once (its id is the message id)', async (t) => {
    const hold = newHold()
    t.equal((await m.send('/v1/chat/completions', chat, { hold })).status, 200)
    t.equal((await m.send('/v1/chat/completions', chat, { hold })).status, 200)
    await reportOf(m.reports, hold)
    // both were published; JetStream kept the first
    t.equal((await m.reports()).get(hold)!.length, 1)
  })

  top.test('a request refused before any work (400) gives its hold back: a report of 0', async (t) => {
    const res = await m.send('/v1/chat/completions', { ...chat, model: 'gpt-nope' })
    t.equal(res.status, 400)
    t.match(await reportOf(m.reports, res.hold), [{ amount: '0', outcome: 'failed', usage: { inputTokens: 0, outputTokens: 0 } }])
  })

  top.test('a hold smaller than the work: the model may write only what the hold covers, and the hold is what is kept', async (t) => {
    const before = m.model.requests.length
    const res = await m.send('/v1/chat/completions', chat, { amount: '2010' })
    t.equal(res.status, 200, res.text)
    const limit = (m.model.requests[before]!.body as { max_tokens?: number }).max_tokens!
    t.ok(Number.isInteger(limit) && limit > 0 && limit < 200, `max_tokens ${limit}: what 2010 covers after the input`)
    t.equal(res.body.usage.ats_charged, '2010', 'the model counted more input than estimated: the hold, not more')
    t.match(await reportOf(m.reports, res.hold), [{ amount: '2010', outcome: 'complete' }])
  })

  top.test('a hold that does not cover the input: the model is not asked, the answer fails and the hold comes back', async (t) => {
    const before = m.model.requests.length
    const res = await m.send('/v1/chat/completions', chat, { amount: '3' })
    t.equal(res.status, 500)
    t.match(res.body.error.message, /credit held for this request/)
    t.equal(m.model.requests.length, before, 'no model turn was paid for')
    t.match(await reportOf(m.reports, res.hold), [{ amount: '0', outcome: 'failed' }])
  })
})

t.test('agent jobs paid by a credit hold', async (top) => {
  // a prompt with "tool" in it calls a tool that does not exist once (a step, answered an error), then
  // the model answers; a request in `failing` has its answer broken off after a token (the job fails)
  const m = await startMetered(top, {
    plan: (prompt, round) => (prompt.includes('tool') && round === 0 ? [{ name: 'no_such_tool', arguments: '{}' }] : []),
    fault: (index) => (failing.has(index) ? { cutAfterTokens: 1 } : undefined),
  })
  const failing = new Set<number>()
  const finished = (jobId: string) =>
    eventually(`job ${jobId} finished`, async () => {
      const job = await m.read(`/agent/job/${jobId}`)
      return ['complete', 'failed', 'cancelled'].includes(job.status) && job.credit?.charged !== undefined ? job : undefined
    })

  top.test('complete: the tokens of every model turn plus its tool calls; the job shows the charge', async (t) => {
    const res = await m.send('/agent/prompt', { prompt: 'use a tool' }, { amount: '900000' })
    t.equal(res.status, 202, res.text)
    const job = await finished(res.body.jobId)
    t.equal(job.status, 'complete', job.error)
    const { promptTokens, completionTokens } = job.result.usage
    t.equal(completionTokens, 14, 'two model turns')
    const cost = String(agentCost(promptTokens, completionTokens, 1))
    t.equal(job.result.charged, cost)
    t.same(job.credit, { held: '900000', charged: cost })
    t.match(await reportOf(m.reports, res.hold), [
      { amount: cost, outcome: 'complete', usage: { model: 'ats-agent', inputTokens: promptTokens, outputTokens: 14, steps: 3 } },
    ])
  })

  top.test('failed: the hold comes back (a report of 0) and the job says so', async (t) => {
    failing.add(m.model.requests.length)
    const res = await m.send('/agent/prompt', { prompt: 'fail please' })
    const job = await finished(res.body.jobId)
    t.equal(job.status, 'failed')
    t.same(job.credit, { held: '1000000', charged: '0' })
    t.match(await reportOf(m.reports, res.hold), [{ amount: '0', outcome: 'failed', reason: /language model/ }])
  })

  top.test('cancelled while running: what the model had written until then is kept, at most the hold', async (t) => {
    // a slow model (a token every 30 ms) saying back a long prompt
    const slow = await startMetered(t, { tokenDelayMs: 30 })
    const res = await slow.send('/agent/prompt', { prompt: 'say back these words '.repeat(20) }, { amount: '5000' })
    await eventually('some of the answer written', async () => (slow.model.requests[0]?.sent.first ? true : undefined))
    await new Promise((resolve) => setTimeout(resolve, 100))
    t.equal((await slow.cancel(res.body.jobId)).status, 200)
    const [report] = (await reportOf(slow.reports, res.hold))!
    t.match(report, { outcome: 'complete', reason: 'cancelled while running: the work done until then', usage: { inputTokens: 0 } })
    t.ok(
      report!.usage.outputTokens > 0 && report!.usage.outputTokens < 60,
      `${report!.usage.outputTokens} tokens written before the cancel`,
    )
    t.equal(report!.amount, String(agentCost(0, report!.usage.outputTokens)), "at ats-agent's output price")
    t.same((await slow.read(`/agent/job/${res.body.jobId}`)).credit, { held: '5000', charged: report!.amount })
  })

  top.test('cancelled before a worker started it: voided, 0', async (t) => {
    // an API process only: no worker takes the job
    const api = await startMetered(t, {}, { AGENT_ROLE: 'api' })
    const res = await api.send('/agent/prompt', { prompt: 'price of ETH' }, { amount: '5000' })
    t.equal(res.status, 202)
    t.equal((await api.cancel(res.body.jobId)).status, 200)
    t.match(await reportOf(api.reports, res.hold), [{ amount: '0', outcome: 'voided', reason: 'cancelled before it started' }])
    t.same((await api.read(`/agent/job/${res.body.jobId}`)).credit, { held: '5000', charged: '0' })
  })
})
