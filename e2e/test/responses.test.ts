import OpenAI, { type APIError, BadRequestError, NotFoundError } from 'openai'
import t from 'tap'
import { eventually, startAgentFleet } from './fleet.ts'

/**
 * POST /v1/responses as OpenAI's own npm client sees it: pointed at the gateway with an API key,
 * unmodified. Each response is a job of the real pipeline on the devnet.
 */
// predictions from the Polymarket stand-in, which a test makes hang (the job waits in its tool until cancelled)
const fleet = await startAgentFleet(t, { marketEnv: { PREDICTION_SOURCE: 'polymarket' } })
const { request, createKey, gateway, upstreams } = fleet
const writer = await createKey('readwrite', 'responses client')
const client = (key = writer.key) => new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 })
const openai = client()
const model = 'ats-planner'
const prompt = 'What is the price of ARB?'
const priceOf = (symbol: string) => new RegExp(`^${symbol}: \\$[0-9.,]+ \\([+-][0-9.]+% in 24h\\)$`)
const agentOf = (response: unknown) => (response as { agent: any }).agent
const jobsOf = async (key: string) => (await request('/portfolio/jobs', { key })).body.jobs as any[]

t.test('a response: the live price as output_text, the job behind it in the agent field and /portfolio/jobs', async (t) => {
  const response = await openai.responses.create({ model, input: prompt, metadata: { ticket: '42' } })
  t.match(response, { object: 'response', status: 'completed', model, error: null, background: false, previous_response_id: null, metadata: { ticket: '42' } })
  t.match(response.output_text, priceOf('ARB'), 'the live price of ARB')
  const trace = agentOf(response)
  t.match(trace, { jobId: /^job_/, threadId: /^thr_/, steps: 2, transactions: [] })
  t.equal(response.id, `resp_${trace.jobId}`)
  t.same(
    trace.tool_calls.map((c: any) => [c.function.name, JSON.parse(c.function.arguments), c.status]),
    [['get_prices', { symbols: ['ARB'] }, 'ok']],
  )
  t.match(response.output, [
    { type: 'message', id: `msg_${trace.jobId}`, status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: response.output_text, annotations: [] }] },
  ])
  const usage = response.usage!
  t.ok(usage.input_tokens > 0 && usage.output_tokens > 0, 'usage is counted')
  t.equal(usage.total_tokens, usage.input_tokens + usage.output_tokens)
  t.match(usage, { input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } })

  const again = await openai.responses.retrieve(response.id)
  t.match(again, { id: response.id, status: 'completed', output_text: response.output_text, metadata: { ticket: '42' }, usage })
  t.equal((await openai.responses.retrieve(trace.jobId)).id, response.id, 'the plain job id works too')
  t.match((await jobsOf(writer.key)).find((j) => j.id === trace.jobId), { status: 'complete', prompt, result: { text: response.output_text } })
})

t.test('streamed: OpenAI\'s event sequence, and responses.stream() accumulates the same response', async (t) => {
  const stream = await openai.responses.create({ model, input: prompt, stream: true })
  const events: any[] = []
  for await (const event of stream) events.push(event)
  const types = [...new Set(events.map((e) => e.type))]
  t.same(types, [
    'response.created',
    'response.in_progress',
    'response.output_item.added',
    'response.content_part.added',
    'response.output_text.delta',
    'response.output_text.done',
    'response.content_part.done',
    'response.output_item.done',
    'response.completed',
  ])
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i), 'numbered from 0')
  const deltas = events.filter((e) => e.type === 'response.output_text.delta')
  t.ok(deltas.length > 2, 'the text in several pieces')
  const completed = events.at(-1).response
  const text = completed.output[0].content[0].text
  t.match(text, priceOf('ARB'))
  t.equal(deltas.map((e) => e.delta).join(''), text, 'the deltas join to the text')
  t.ok(deltas.every((e) => e.item_id === `msg_${agentOf(completed).jobId}` && e.output_index === 0 && e.content_index === 0))
  t.equal(events[0].response.status, 'in_progress')
  t.match(completed, { status: 'completed', id: `resp_${agentOf(completed).jobId}`, usage: { total_tokens: Number } })

  const runner = openai.responses.stream({ model, input: prompt })
  let snapshot = ''
  runner.on('response.output_text.delta', (e) => {
    snapshot = e.snapshot
  })
  const final = await runner.finalResponse()
  t.equal(final.status, 'completed')
  t.equal(final.output_text, text, 'the same answer')
  t.equal(snapshot, text, 'the snapshot grows to the whole text')
  t.match(agentOf(final), { jobId: /^job_/, tool_calls: [{ function: { name: 'get_prices' } }] })
})

t.test('background: queued at once, retrieved until completed; another cancelled', async (t) => {
  const queued = await openai.responses.create({ model, input: 'price of ETH', background: true, metadata: { run: 'nightly' } })
  t.match(queued, { status: 'queued', background: true, output: [], usage: null, metadata: { run: 'nightly' } })
  const done = await eventually(`${queued.id} completed`, async () => {
    const now = await openai.responses.retrieve(queued.id)
    return now.status === 'completed' ? now : undefined
  })
  t.match(done.output_text, priceOf('ETH'))
  t.match(done, { background: true, metadata: { run: 'nightly' } })
  const finished = await openai.responses.cancel(queued.id).catch((e: unknown) => e)
  t.type(finished, BadRequestError, 'a completed response cannot be cancelled')
  t.match((finished as APIError).error, { message: /is already completed: only a queued or in-progress response can be cancelled/ })

  // prediction markets come from "Polymarket", which now hangs: the job waits in its tool
  upstreams.behave('/gamma', 'hang')
  t.teardown(() => upstreams.behave('/gamma', 'ok'))
  const hanging = await openai.responses.create({ model, input: 'prediction markets about bitcoin', background: true })
  const cancelled = await openai.responses.cancel(hanging.id)
  t.match(cancelled, { id: hanging.id, status: 'cancelled', output: [], background: true })
  t.equal((await openai.responses.retrieve(hanging.id)).status, 'cancelled')
  t.equal((await openai.responses.cancel(hanging.id)).status, 'cancelled', 'cancelling again answers the same')
  t.match((await jobsOf(writer.key)).find((j) => `resp_${j.id}` === hanging.id), { status: 'cancelled' })

  // a streamed one cancelled by id while it waits: the stream ends with response.failed, status cancelled
  const streamed = openai.responses.stream({ model, input: 'prediction markets about bitcoin' })
  streamed.on('response.created', (e) => void openai.responses.cancel(e.response.id))
  const ended = await streamed.finalResponse()
  t.match(ended, { status: 'cancelled', output: [], output_text: '' })

  const other = client((await createKey('readwrite', 'someone else')).key)
  for (const [name, call] of [['retrieve', () => other.responses.retrieve(done.id)], ['cancel', () => other.responses.cancel(hanging.id)]] as const) {
    const missing = await call().catch((e: unknown) => e)
    t.type(missing, NotFoundError, `${name} by another key`)
    t.match((missing as APIError).error, { message: /no response resp_job_\S+ of this API key/, type: 'invalid_request_error', code: 'response_not_found' })
  }
})

t.test('a follow-up by previous_response_id continues the thread; one from an earlier response branches', async (t) => {
  const first = await openai.responses.create({ model, input: 'price of ETH' })
  const second = await openai.responses.create({ model, input: [{ role: 'user', content: [{ type: 'input_text', text: 'and GMX?' }] }], previous_response_id: first.id })
  t.match(second.output_text, priceOf('GMX'))
  t.equal(second.previous_response_id, first.id)
  t.equal(agentOf(second).threadId, agentOf(first).threadId, 'the same thread')
  t.not(agentOf(second).jobId, agentOf(first).jobId)

  const branch = await openai.responses.create({ model, input: 'and ARB?', previous_response_id: agentOf(first).jobId })
  t.match(branch.output_text, priceOf('ARB'))
  t.equal(branch.previous_response_id, first.id, 'named as a response id')
  t.not(agentOf(branch).threadId, agentOf(first).threadId, 'a new thread: the first one goes on with GMX')

  const unknown = await request('/v1/responses', { method: 'POST', key: writer.key, body: { model, input: 'hi', previous_response_id: 'resp_job_nothing' } })
  t.equal(unknown.status, 400)
  t.match(unknown.body, { error: { message: /no response resp_job_nothing of this API key/, param: 'previous_response_id' } })
})

t.test('bad input: 400 in OpenAI\'s shape, naming the param, and no job', async (t) => {
  const refused = await createKey('readwrite', 'refused')
  const cases: Array<[string, unknown, RegExp, string]> = [
    ['unknown model', { model: 'gpt-4o', input: 'hi' }, /the model 'gpt-4o' does not exist; models: ats-agent, ats-planner/, 'model'],
    ['no input', { model }, /Missing required params: input/, 'input'],
    ['empty input', { model, input: '  ' }, /input is empty/, 'input'],
    ['no items', { model, input: [] }, /input is empty/, 'input'],
    [
      'a function_call_output item',
      { model, input: [{ role: 'user', content: 'hi' }, { type: 'function_call_output', call_id: 'call_1', output: '{}' }] },
      /input\[1\] is a function_call_output item: only message items/,
      'input[1].type',
    ],
    ['a bad role', { model, input: [{ role: 'wizard', content: 'hi' }] }, /input\[0\].role must be one of user, assistant, system, developer/, 'input[0].role'],
    ['an image part', { model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] }, /only text parts/, 'input[0].content[0]'],
    ['the last item is not the user\'s', { model, input: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] }, /the last message must be a user message/, 'input[1].role'],
    ['client tools', { model, input: 'hi', tools: [{ type: 'function', name: 'f', parameters: {} }] }, /tools is not supported/, 'tools'],
    ['a json format', { model, input: 'hi', text: { format: { type: 'json_object' } } }, /text.format json_object is not supported/, 'text.format'],
    ['stream in the background', { model, input: 'hi', stream: true, background: true }, /stream with background is not supported/, 'stream'],
    ['too much metadata', { model, input: 'hi', metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, /metadata must NOT have more than 16 properties/, 'metadata'],
    ['a prompt too long', { model, input: 'x'.repeat(4001) }, /a prompt is at most 4000/, 'input'],
  ]
  for (const [name, body, message, param] of cases) {
    const res = await request('/v1/responses', { method: 'POST', key: refused.key, body })
    t.equal(res.status, 400, name)
    t.match(res.body, { error: { message, type: 'invalid_request_error', param } }, name)
  }
  const thrown = await client(refused.key).responses.create({ model, input: [{ type: 'function_call_output', call_id: 'call_1', output: '{}' }] }).catch((e: unknown) => e)
  t.type(thrown, BadRequestError, 'the openai client raises BadRequestError')
  t.match((thrown as APIError).message, /only message items/)
  t.same(await jobsOf(refused.key), [], 'no job for a refused request')
})
