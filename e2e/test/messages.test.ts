import Anthropic, { APIError, AuthenticationError, BadRequestError, InternalServerError, NotFoundError, PermissionDeniedError } from '@anthropic-ai/sdk'
import t from 'tap'
import { startAgentFleet } from './fleet.ts'

/**
 * POST /v1/messages as Anthropic's own npm client sees it: pointed at the gateway with an API key
 * (sent as x-api-key), unmodified. The agent behind it runs the real job pipeline on the devnet.
 */
// predictions from the Polymarket stand-in, which a test makes fail
const fleet = await startAgentFleet(t, { marketEnv: { PREDICTION_SOURCE: 'polymarket' } })
const { request, createKey, gateway, upstreams } = fleet
const writer = await createKey('readwrite', 'anthropic client')
const client = (key = writer.key) => new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 })
const anthropic = client()
const prompt = 'What is the price of ARB?'
const ask = { model: 'ats-planner', max_tokens: 1024, messages: [{ role: 'user' as const, content: prompt }] }

t.test('a message, and the same prompt streamed both ways: the joined text deltas are the same text', async (t) => {
  const message = await anthropic.messages.create(ask)
  t.match(message, { type: 'message', role: 'assistant', model: 'ats-planner', stop_reason: 'end_turn', stop_sequence: null })
  t.equal(message.content.length, 1)
  const [block] = message.content
  t.equal(block!.type, 'text')
  const text = (block as Anthropic.TextBlock).text
  t.match(text, /^ARB: \$[0-9.,]+ \([+-][0-9.]+% in 24h\)$/, 'the live price of ARB')
  t.ok(message.usage.input_tokens > 0 && message.usage.output_tokens > 0, 'usage is counted')
  const trace = (message as unknown as { agent: any }).agent
  t.match(trace, { jobId: /^job_/, threadId: /^thr_/, steps: 2, transactions: [] })
  t.same(
    trace.tool_calls.map((c: any) => [c.function.name, JSON.parse(c.function.arguments), c.status]),
    [['get_prices', { symbols: ['ARB'] }, 'ok']],
  )
  t.equal(message.id, `msg_${trace.jobId}`)

  const events: any[] = []
  for await (const event of await anthropic.messages.create({ ...ask, stream: true })) events.push(event)
  const types = events.map((e) => e.type).filter((type) => type !== 'content_block_delta')
  t.same(types, ['message_start', 'content_block_start', 'agent_step', 'agent_step', 'content_block_stop', 'message_delta', 'message_stop'], "Anthropic's events in order, the agent's steps among them")
  const deltas = events.filter((e) => e.type === 'content_block_delta')
  t.ok(deltas.length > 2, 'the text in several pieces')
  t.ok(deltas.every((e) => e.index === 0 && e.delta.type === 'text_delta'))
  t.equal(deltas.map((e) => e.delta.text).join(''), text, 'the streamed text is the message text')
  t.match(events[0].message, { id: /^msg_job_/, type: 'message', role: 'assistant', content: [], model: 'ats-planner' })
  t.same(
    events.filter((e) => e.type === 'agent_step').map((e) => [e.step.tool, e.step.phase]),
    [['get_prices', 'started'], ['get_prices', 'finished']],
    'each step as it happens',
  )
  const delta = events.find((e) => e.type === 'message_delta')
  t.same(delta.delta, { stop_reason: 'end_turn', stop_sequence: null })
  t.equal(delta.usage.output_tokens, message.usage.output_tokens, 'the same answer, the same count')
  t.equal(delta.agent.tool_calls[0].function.name, 'get_prices', 'the full trace at the end')

  // the SDK's own accumulator builds the same message
  const streamed = anthropic.messages.stream(ask)
  const pieces: string[] = []
  streamed.on('text', (piece) => pieces.push(piece))
  const final = await streamed.finalMessage()
  t.same(final.content, [{ type: 'text', text }])
  t.equal(pieces.join(''), text)
  t.match(final, { stop_reason: 'end_turn', usage: { input_tokens: message.usage.input_tokens, output_tokens: message.usage.output_tokens } })
  t.equal(await streamed.finalText(), text)

  const jobs = await request('/portfolio/jobs', { key: writer.key })
  t.match(jobs.body.jobs.find((j: any) => j.id === trace.jobId), { status: 'complete', prompt, result: { text } }, 'a job of the key, in /portfolio/jobs')
})

t.test('system text and earlier messages reach the agent', async (t) => {
  const message = await anthropic.messages.create({
    model: 'ats-planner',
    max_tokens: 64,
    system: [{ type: 'text', text: 'You are terse.' }],
    messages: [
      { role: 'user', content: 'price of ETH' },
      { role: 'assistant', content: [{ type: 'text', text: 'ETH: $3,000.00' }] },
      { role: 'user', content: [{ type: 'text', text: 'and GMX?' }] },
    ],
    stop_sequences: ['\n\n'],
    metadata: { user_id: 'user-42' },
  })
  t.match((message.content[0] as Anthropic.TextBlock).text, /^GMX: \$/)
  t.same((message as any).agent.tool_calls.map((c: any) => JSON.parse(c.function.arguments)), [{ symbols: ['GMX'] }])
})

t.test("keys: a bad one is 401, a readonly one 403, in Anthropic's shape", async (t) => {
  const wrong = await client('atsk_thisKeyDoesNotExist-000000000000').messages.create(ask).catch((e: unknown) => e)
  t.type(wrong, AuthenticationError)
  t.same((wrong as APIError).error, { type: 'error', error: { type: 'authentication_error', message: 'invalid or revoked API key' } })
  const reader = await createKey('readonly', 'reader')
  const denied = await client(reader.key).messages.create(ask).catch((e: unknown) => e)
  t.type(denied, PermissionDeniedError)
  t.match((denied as APIError).error, { type: 'error', error: { type: 'permission_error', message: /needs an API key of tier readwrite or higher; this key is readonly/ } })
})

t.test("bad requests: 400 (404 for a model) in Anthropic's shape, naming the field", async (t) => {
  const toolResult = await anthropic.messages
    .create({
      ...ask,
      messages: [
        { role: 'user', content: prompt },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_prices', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '42' }] },
      ],
    })
    .catch((e: unknown) => e)
  t.type(toolResult, BadRequestError)
  t.same((toolResult as APIError).error, {
    type: 'error',
    error: { type: 'invalid_request_error', message: 'messages[1].content[0] is a tool_use part: only text parts ({type: "text", text}) are supported' },
  })
  const model = await anthropic.messages.create({ ...ask, model: 'claude-next' }).catch((e: unknown) => e)
  t.type(model, NotFoundError)
  t.match((model as APIError).error, { error: { type: 'not_found_error', message: "the model 'claude-next' does not exist; models: ats-agent, ats-planner" } })

  const cases: Array<[string, unknown, RegExp]> = [
    ['no max_tokens', { model: 'ats-planner', messages: [{ role: 'user', content: 'hi' }] }, /Missing required params: max_tokens/],
    ['max_tokens 0', { ...ask, max_tokens: 0 }, /body\/max_tokens must be >= 1/],
    ['a system role', { ...ask, messages: [{ role: 'system', content: 'hi' }] }, /body\/messages\/0\/role must be equal to one of the allowed values: user, assistant/],
    ['the last message is not the user\'s', { ...ask, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] }, /the last message must be a user message/],
    ['an image block', { ...ask, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://x/y.png' } }] }] }, /messages\[0\].content\[0\] is a image part/],
    ['a system image', { ...ask, system: [{ type: 'image' }] }, /system\[0\] is a image part/],
    ['client tools', { ...ask, tools: [{ name: 'f', input_schema: { type: 'object' } }] }, /tools is not supported/],
  ]
  for (const [name, body, message] of cases) {
    const res = await request('/v1/messages', { method: 'POST', key: writer.key, body })
    t.equal(res.status, 400, name)
    t.match(res.body, { type: 'error', error: { type: 'invalid_request_error', message } }, name)
  }
  const unknown = await request('/v1/messages/count_tokens', { method: 'POST', key: writer.key, body: ask })
  t.equal(unknown.status, 404)
  t.match(unknown.body, { type: 'error', error: { type: 'not_found_error' } }, 'unknown paths under /v1/messages too')
})

t.test("a job that fails: 500 api_error, and mid-stream an error event the SDK raises", async (t) => {
  // prediction markets come from "Polymarket", which now fails: the job's step fails, and the job with it
  upstreams.behave('/gamma', 500)
  t.teardown(() => upstreams.behave('/gamma', 'ok'))
  const failing = { ...ask, messages: [{ role: 'user' as const, content: 'prediction markets about bitcoin' }] }
  const plain = await anthropic.messages.create(failing).catch((e: unknown) => e)
  t.type(plain, InternalServerError)
  t.match((plain as APIError).error, { type: 'error', error: { type: 'api_error', message: /^the agent could not answer: the \w+ step failed/ } })
  t.equal((plain as APIError).headers?.get('x-should-retry'), 'false', 'the same request would fail the same way')

  const events: string[] = []
  const streamed = await (async () => {
    for await (const event of await anthropic.messages.create({ ...failing, stream: true })) events.push(event.type)
  })().catch((e: unknown) => e)
  t.type(streamed, APIError)
  t.match((streamed as APIError).error, { type: 'error', error: { type: 'api_error', message: /^the agent could not answer: the \w+ step failed/ } })
  t.same(events.slice(0, 2), ['message_start', 'content_block_start'], 'the stream had started')
  t.notOk(events.includes('message_stop'))
  const final = await anthropic.messages.stream(failing).finalMessage().catch((e: unknown) => e)
  t.type(final, APIError, 'finalMessage() rejects with it')
})
