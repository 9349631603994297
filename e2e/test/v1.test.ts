import OpenAI, { APIError, AuthenticationError, BadRequestError, PermissionDeniedError, RateLimitError } from 'openai'
import t from 'tap'
import { eventually, startAgentFleet } from './fleet.ts'

/**
 * The /v1 group as OpenAI's own npm client sees it: pointed at the gateway with an API key,
 * unmodified. The agent behind it runs the real job pipeline on the devnet.
 */
// predictions from the Polymarket stand-in, which a test makes hang (the job waits in its tool until cancelled)
const fleet = await startAgentFleet(t, { marketEnv: { PREDICTION_SOURCE: 'polymarket' } })
const { request, createKey, gateway, upstreams } = fleet
const writer = await createKey('readwrite', 'openai client')
const client = (key = writer.key, options: ConstructorParameters<typeof OpenAI>[0] = {}) =>
  new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0, ...options })
const openai = client()
const prompt = 'What is the price of ARB?'

t.test('the models: OpenAI\'s list shape, and one model by id', async (t) => {
  const models = await openai.models.list()
  t.same(
    models.data.map((m) => m.id),
    ['ats-agent', 'ats-planner'],
  )
  for (const m of models.data) t.match(m, { object: 'model', created: Number, owned_by: 'agent-trading-service' })
  const one = await openai.models.retrieve('ats-planner')
  t.equal(one.id, 'ats-planner')
  const missing = await openai.models.retrieve('gpt-4o').catch((error: unknown) => error)
  t.type(missing, APIError)
  t.equal((missing as APIError).status, 404)
  t.match((missing as APIError).error, { message: /the model 'gpt-4o' does not exist; models: ats-agent, ats-planner/, type: 'invalid_request_error', code: 'model_not_found' })
})

t.test('a completion, and the same prompt streamed: the joined deltas are the same text', async (t) => {
  const completion = await openai.chat.completions.create({ model: 'ats-planner', messages: [{ role: 'user', content: prompt }] })
  t.equal(completion.object, 'chat.completion')
  t.equal(completion.model, 'ats-planner')
  const [choice] = completion.choices
  t.equal(choice!.finish_reason, 'stop')
  t.equal(choice!.message.role, 'assistant')
  const text = choice!.message.content!
  t.match(text, /^ARB: \$[0-9.,]+ \([+-][0-9.]+% in 24h\)$/, 'the live price of ARB')
  t.ok(completion.usage!.prompt_tokens > 0 && completion.usage!.completion_tokens > 0, 'usage is counted')
  t.equal(completion.usage!.total_tokens, completion.usage!.prompt_tokens + completion.usage!.completion_tokens)
  // the agent's own tool calls ride in the extra `agent` field, not in message.tool_calls
  t.notOk(choice!.message.tool_calls?.length, 'nothing for the client to execute')
  const trace = (completion as unknown as { agent: any }).agent
  t.match(trace, { jobId: /^job_/, threadId: /^thr_/, steps: 2, transactions: [] })
  t.same(
    trace.tool_calls.map((c: any) => [c.function.name, JSON.parse(c.function.arguments), c.status]),
    [['get_prices', { symbols: ['ARB'] }, 'ok']],
  )
  t.equal(completion.id, `chatcmpl-${trace.jobId}`)
  t.ok(trace.tool_calls[0].output.prices.ARB.price > 0, 'the tool output is in the trace')

  const stream = await openai.chat.completions.create({
    model: 'ats-planner',
    messages: [{ role: 'user', content: prompt }],
    stream: true,
    stream_options: { include_usage: true },
  })
  const chunks: any[] = []
  for await (const chunk of stream) chunks.push(chunk)
  const deltas = chunks.flatMap((c) => c.choices.map((ch: any) => ch.delta.content ?? '')).join('')
  t.equal(deltas, text, 'the streamed text is the completion text')
  t.ok(chunks.filter((c) => c.choices[0]?.delta.content).length > 2, 'in several pieces')
  t.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === chunks[0].id))
  t.equal(chunks[0].choices[0].delta.role, 'assistant')
  const steps = chunks.filter((c) => c.agent?.step).map((c) => [c.agent.step.tool, c.agent.step.phase])
  t.same(steps, [['get_prices', 'started'], ['get_prices', 'finished']], 'each step as it happens')
  const last = chunks.at(-1)
  t.same(last.choices, [], 'the usage chunk has no choices')
  t.equal(last.usage.completion_tokens, completion.usage!.completion_tokens, 'the same answer, the same count')
  t.equal(chunks.at(-2).choices[0].finish_reason, 'stop')
  t.equal(chunks.at(-2).agent.tool_calls[0].function.name, 'get_prices')

  // the runner-side helper of the openai package accumulates the same text
  const runner = openai.chat.completions.stream({ model: 'ats-planner', messages: [{ role: 'user', content: prompt }] })
  t.equal(await runner.finalContent(), text)

  t.test('the jobs behind them are in /portfolio/jobs of the same key, and no other', async (t) => {
    const jobs = await request('/portfolio/jobs', { key: writer.key })
    t.equal(jobs.status, 200)
    const ids = jobs.body.jobs.map((j: any) => j.id)
    t.ok(ids.includes(trace.jobId), 'the completion')
    t.ok(ids.includes(chunks.at(-2).agent.jobId), 'the stream')
    t.match(jobs.body.jobs.find((j: any) => j.id === trace.jobId), { status: 'complete', prompt, result: { text, toolCalls: ['get_prices'] } })
    const other = await createKey('readwrite', 'someone else')
    t.same((await request('/portfolio/jobs', { key: other.key })).body.jobs, [])
  })
})

t.test('a conversation: system instructions and history reach the agent; a follow-up uses the history', async (t) => {
  const completion = await openai.chat.completions.create({
    model: 'ats-planner',
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'price of ETH' },
      { role: 'assistant', content: 'ETH: $3,000.00' },
      { role: 'user', content: [{ type: 'text', text: 'and GMX?' }] },
    ],
  })
  t.match(completion.choices[0]!.message.content, /^GMX: \$/)
  t.same((completion as any).agent.tool_calls.map((c: any) => JSON.parse(c.function.arguments)), [{ symbols: ['GMX'] }])
})

t.test('keys: none is 401, readonly is 403, a bad key 401, all in OpenAI\'s shape', async (t) => {
  const none = await request('/v1/models')
  t.equal(none.status, 401)
  t.match(none.body, { error: { message: /missing API key/, type: 'invalid_request_error', code: 'invalid_api_key', param: null } })
  const reader = await createKey('readonly', 'reader')
  const denied = await client(reader.key).chat.completions.create({ model: 'ats-planner', messages: [{ role: 'user', content: prompt }] }).catch((e: unknown) => e)
  t.type(denied, PermissionDeniedError)
  t.match((denied as APIError).error, { message: /needs an API key of tier readwrite or higher; this key is readonly/, type: 'permission_error' })
  const wrong = await client('atsk_thisKeyDoesNotExist-000000000000').models.list().catch((e: unknown) => e)
  t.type(wrong, AuthenticationError)
  t.match((wrong as APIError).error, { code: 'invalid_api_key' })
})

t.test('bad bodies: 400 in OpenAI\'s shape, naming the field', async (t) => {
  const cases: Array<[string, unknown, RegExp, string | null, string | null]> = [
    ['no messages', { model: 'ats-planner' }, /Missing required params: messages/, 'messages', null],
    ['empty messages', { model: 'ats-planner', messages: [] }, /body\/messages must NOT have fewer than 1 items/, 'messages', null],
    ['unknown model', { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }, /the model 'gpt-4o' does not exist/, 'model', 'model_not_found'],
    ['a bad role', { model: 'ats-planner', messages: [{ role: 'wizard', content: 'hi' }] }, /body\/messages\/0\/role must be equal to one of the allowed values: system, developer, user, assistant, tool/, 'messages[0].role', null],
    ['no model', { messages: [{ role: 'user', content: 'hi' }] }, /Missing required params: model/, 'model', null],
    ['the last message is not the user\'s', { model: 'ats-planner', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] }, /the last message must be a user message/, 'messages[1].role', 'invalid_request'],
    ['an empty user message', { model: 'ats-planner', messages: [{ role: 'user', content: '  ' }] }, /messages\[0\].content is empty/, 'messages[0].content', 'invalid_request'],
    ['an image part', { model: 'ats-planner', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] }, /only text parts/, 'messages[0].content[0]', 'invalid_request'],
    ['client tools', { model: 'ats-planner', messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: { name: 'f' } }] }, /tools is not supported/, 'tools', 'invalid_request'],
    ['n = 2', { model: 'ats-planner', messages: [{ role: 'user', content: 'hi' }], n: 2 }, /body\/n must be <= 1/, 'n', null],
    ['a prompt too long', { model: 'ats-planner', messages: [{ role: 'user', content: 'x'.repeat(4001) }] }, /a prompt is at most 4000/, 'messages[0].content', 'invalid_request'],
  ]
  for (const [name, body, message, param, code] of cases) {
    const res = await request('/v1/chat/completions', { method: 'POST', key: writer.key, body })
    t.equal(res.status, 400, name)
    t.match(res.body, { error: { message, type: 'invalid_request_error', param, code } }, name)
  }
  const notJson = await fetch(`${gateway.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${writer.key}`, 'content-type': 'application/json' }, body: '{"model":' })
  t.equal(notJson.status, 400)
  t.match(await notJson.json(), { error: { type: 'invalid_request_error', message: String } })
  // the openai client raises its BadRequestError with our message
  const thrown = await openai.chat.completions.create({ model: 'ats-planner', messages: [] }).catch((e: unknown) => e)
  t.type(thrown, BadRequestError)
  t.match((thrown as APIError).message, /messages must NOT have fewer than 1 items/)
  t.equal((await request('/v1/nothing-here', { key: writer.key })).body.error.type, 'invalid_request_error', 'unknown /v1 routes too')
})

t.test('closing the stream cancels the job', async (t) => {
  // prediction markets come from "Polymarket", which now hangs: the job waits in its tool
  upstreams.behave('/gamma', 'hang')
  t.teardown(() => upstreams.behave('/gamma', 'ok'))
  const controller = new AbortController()
  const stream = await openai.chat.completions.create(
    { model: 'ats-planner', messages: [{ role: 'user', content: 'prediction markets about bitcoin' }], stream: true },
    { signal: controller.signal },
  )
  let jobId: string | undefined
  for await (const chunk of stream as AsyncIterable<any>) {
    if (chunk.agent?.step?.phase === 'started') {
      jobId = chunk.agent.jobId
      controller.abort()
    }
  }
  t.ok(jobId, 'the tool started before the client left')
  const job = await eventually(`job ${jobId} cancelled`, async () => {
    const jobs = await request('/portfolio/jobs', { key: writer.key })
    const found = jobs.body.jobs.find((j: any) => j.id === jobId)
    return found?.status === 'cancelled' ? found : undefined
  })
  t.equal(job.status, 'cancelled')
  t.notOk(job.result, 'no answer was stored')
})

t.test('over the rate limit: 429 with retry-after, which the openai client waits out', async (t) => {
  // a gateway of its own with a readwrite limit of 2 requests a second (counts are per key, in Redis)
  const { startService } = await import('@ats/service-kit/testing')
  const { gatewayService } = await import('@ats/gateway/service')
  const strict = await startService(t, gatewayService, { ...fleet.gatewayEnv, RATE_LIMIT_READWRITE: '2', RATE_LIMIT_WINDOW_MS: '1000' })
  const key = await createKey('readwrite', 'rate limited')
  const sent: number[] = []
  const counting: typeof fetch = async (url, init) => {
    const res = await fetch(url, init)
    sent.push(res.status)
    return res
  }
  const limited = client(key.key, { baseURL: `${strict.url}/v1`, fetch: counting })
  await limited.models.list()
  await limited.models.list()
  const refused = await limited.models.list().catch((e: unknown) => e)
  t.type(refused, RateLimitError)
  t.match((refused as APIError).error, { type: 'requests', code: 'rate_limit_exceeded', message: /rate limit exceeded: 2 requests per 1 s/ })
  t.ok(Number((refused as APIError).headers?.get('retry-after')) >= 1, 'retry-after in seconds')

  // fill the window again, then a client that retries: it waits the retry-after out and gets through
  const hit = () => fetch(`${strict.url}/v1/models`, { headers: { authorization: `Bearer ${key.key}` } }).then((res) => res.status)
  while ((await hit()) !== 429) {}
  sent.length = 0
  const patient = client(key.key, { baseURL: `${strict.url}/v1`, fetch: counting, maxRetries: 3 })
  const models = await patient.models.list()
  t.equal(models.data.length, 2, 'answered after waiting')
  t.same(sent.slice(-1), [200])
  t.ok(sent.includes(429), `refused first, then retried: ${sent.join(', ')}`)
})
