import Anthropic, { type APIError as AnthropicAPIError } from '@anthropic-ai/sdk'
import OpenAI, { APIError, AuthenticationError, BadRequestError, NotFoundError, PermissionDeniedError, RateLimitError } from 'openai'
import t from 'tap'
import { eventually, startAgentFleet } from './fleet.ts'

/**
 * The gateway's client APIs (/v1 as OpenAI's npm client sees it, /v1/responses, and /v1/messages
 * as Anthropic's), each through its own unmodified client pointed at the gateway with an API key.
 * The agent behind them runs the real job pipeline on the devnet. One fleet for the file: each
 * API's tests use keys of their own, and a test that changes the Polymarket stand-in puts it back.
 */
// predictions from the Polymarket stand-in, which tests make fail or hang (the job waits in its tool until cancelled)
const fleet = await startAgentFleet(t, { marketEnv: { PREDICTION_SOURCE: 'polymarket' } })

// POST /v1/messages
{
  /**
   * POST /v1/messages as Anthropic's own npm client sees it: pointed at the gateway with an API key
   * (sent as x-api-key), unmodified. The agent behind it runs the real job pipeline on the devnet.
   */
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
    t.same(
      types,
      ['message_start', 'content_block_start', 'agent_step', 'agent_step', 'content_block_stop', 'message_delta', 'message_stop'],
      "Anthropic's events in order, the agent's steps among them",
    )
    const deltas = events.filter((e) => e.type === 'content_block_delta')
    t.ok(deltas.length > 2, 'the text in several pieces')
    t.ok(deltas.every((e) => e.index === 0 && e.delta.type === 'text_delta'))
    t.equal(deltas.map((e) => e.delta.text).join(''), text, 'the streamed text is the message text')
    t.match(events[0].message, { id: /^msg_job_/, type: 'message', role: 'assistant', content: [], model: 'ats-planner' })
    t.same(
      events.filter((e) => e.type === 'agent_step').map((e) => [e.step.tool, e.step.phase]),
      [
        ['get_prices', 'started'],
        ['get_prices', 'finished'],
      ],
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
    t.match(final, {
      stop_reason: 'end_turn',
      usage: { input_tokens: message.usage.input_tokens, output_tokens: message.usage.output_tokens },
    })
    t.equal(await streamed.finalText(), text)

    const jobs = await request('/portfolio/jobs', { key: writer.key })
    t.match(
      jobs.body.jobs.find((j: any) => j.id === trace.jobId),
      { status: 'complete', prompt, result: { text } },
      'a job of the key, in /portfolio/jobs',
    )
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
    t.same(
      (message as any).agent.tool_calls.map((c: any) => JSON.parse(c.function.arguments)),
      [{ symbols: ['GMX'] }],
    )
  })

  t.test("keys: a bad one is 401, a readonly one 403, in Anthropic's shape", async (t) => {
    const wrong = await client('atsk_thisKeyDoesNotExist-000000000000')
      .messages.create(ask)
      .catch((e: unknown) => e)
    t.type(wrong, Anthropic.AuthenticationError)
    t.same((wrong as AnthropicAPIError).error, {
      type: 'error',
      error: { type: 'authentication_error', message: 'invalid or revoked API key' },
    })
    const reader = await createKey('readonly', 'reader')
    const denied = await client(reader.key)
      .messages.create(ask)
      .catch((e: unknown) => e)
    t.type(denied, Anthropic.PermissionDeniedError)
    t.match((denied as AnthropicAPIError).error, {
      type: 'error',
      error: { type: 'permission_error', message: /needs an API key of tier readwrite or higher; this key is readonly/ },
    })
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
    t.type(toolResult, Anthropic.BadRequestError)
    t.same((toolResult as AnthropicAPIError).error, {
      type: 'error',
      error: {
        type: 'invalid_request_error',
        message: 'messages[1].content[0] is a tool_use part: only text parts ({type: "text", text}) are supported',
      },
    })
    const model = await anthropic.messages.create({ ...ask, model: 'claude-next' }).catch((e: unknown) => e)
    t.type(model, Anthropic.NotFoundError)
    t.match((model as AnthropicAPIError).error, {
      error: { type: 'not_found_error', message: "the model 'claude-next' does not exist; models: ats-agent, ats-planner" },
    })

    const cases: Array<[string, unknown, RegExp]> = [
      ['no max_tokens', { model: 'ats-planner', messages: [{ role: 'user', content: 'hi' }] }, /Missing required params: max_tokens/],
      ['max_tokens 0', { ...ask, max_tokens: 0 }, /body\/max_tokens must be >= 1/],
      [
        'a system role',
        { ...ask, messages: [{ role: 'system', content: 'hi' }] },
        /body\/messages\/0\/role must be equal to one of the allowed values: user, assistant/,
      ],
      [
        "the last message is not the user's",
        {
          ...ask,
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: 'hello' },
          ],
        },
        /the last message must be a user message/,
      ],
      [
        'an image block',
        { ...ask, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://x/y.png' } }] }] },
        /messages\[0\].content\[0\] is a image part/,
      ],
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

  t.test('a job that fails: 500 api_error, and mid-stream an error event the SDK raises', async (t) => {
    // prediction markets come from "Polymarket", which now fails: the job's step fails, and the job with it
    upstreams.behave('/gamma', 500)
    t.teardown(() => upstreams.behave('/gamma', 'ok'))
    const failing = { ...ask, messages: [{ role: 'user' as const, content: 'prediction markets about bitcoin' }] }
    const plain = await anthropic.messages.create(failing).catch((e: unknown) => e)
    t.type(plain, Anthropic.InternalServerError)
    t.match((plain as AnthropicAPIError).error, {
      type: 'error',
      error: { type: 'api_error', message: /^the agent could not answer: the \w+ step failed/ },
    })
    t.equal((plain as AnthropicAPIError).headers?.get('x-should-retry'), 'false', 'the same request would fail the same way')

    const events: string[] = []
    const streamed = await (async () => {
      for await (const event of await anthropic.messages.create({ ...failing, stream: true })) events.push(event.type)
    })().catch((e: unknown) => e)
    t.type(streamed, Anthropic.APIError)
    t.match((streamed as AnthropicAPIError).error, {
      type: 'error',
      error: { type: 'api_error', message: /^the agent could not answer: the \w+ step failed/ },
    })
    t.same(events.slice(0, 2), ['message_start', 'content_block_start'], 'the stream had started')
    t.notOk(events.includes('message_stop'))
    const final = await anthropic.messages
      .stream(failing)
      .finalMessage()
      .catch((e: unknown) => e)
    t.type(final, Anthropic.APIError, 'finalMessage() rejects with it')
  })
}

// POST /v1/responses
{
  /**
   * POST /v1/responses as OpenAI's own npm client sees it: pointed at the gateway with an API key,
   * unmodified. Each response is a job of the real pipeline on the devnet.
   */
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
    t.match(response, {
      object: 'response',
      status: 'completed',
      model,
      error: null,
      background: false,
      previous_response_id: null,
      metadata: { ticket: '42' },
    })
    t.match(response.output_text, priceOf('ARB'), 'the live price of ARB')
    const trace = agentOf(response)
    t.match(trace, { jobId: /^job_/, threadId: /^thr_/, steps: 2, transactions: [] })
    t.equal(response.id, `resp_${trace.jobId}`)
    t.same(
      trace.tool_calls.map((c: any) => [c.function.name, JSON.parse(c.function.arguments), c.status]),
      [['get_prices', { symbols: ['ARB'] }, 'ok']],
    )
    t.match(response.output, [
      {
        type: 'message',
        id: `msg_${trace.jobId}`,
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: response.output_text, annotations: [] }],
      },
    ])
    const usage = response.usage!
    t.ok(usage.input_tokens > 0 && usage.output_tokens > 0, 'usage is counted')
    t.equal(usage.total_tokens, usage.input_tokens + usage.output_tokens)
    t.match(usage, { input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } })

    const again = await openai.responses.retrieve(response.id)
    t.match(again, { id: response.id, status: 'completed', output_text: response.output_text, metadata: { ticket: '42' }, usage })
    t.equal((await openai.responses.retrieve(trace.jobId)).id, response.id, 'the plain job id works too')
    t.match(
      (await jobsOf(writer.key)).find((j) => j.id === trace.jobId),
      { status: 'complete', prompt, result: { text: response.output_text } },
    )
  })

  t.test("streamed: OpenAI's event sequence, and responses.stream() accumulates the same response", async (t) => {
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
    t.same(
      events.map((e) => e.sequence_number),
      events.map((_, i) => i),
      'numbered from 0',
    )
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
    t.match(
      (await jobsOf(writer.key)).find((j) => `resp_${j.id}` === hanging.id),
      { status: 'cancelled' },
    )

    // a streamed one cancelled by id while it waits: the stream ends with response.failed, status cancelled
    const streamed = openai.responses.stream({ model, input: 'prediction markets about bitcoin' })
    streamed.on('response.created', (e) => void openai.responses.cancel(e.response.id))
    const ended = await streamed.finalResponse()
    t.match(ended, { status: 'cancelled', output: [], output_text: '' })

    const other = client((await createKey('readwrite', 'someone else')).key)
    for (const [name, call] of [
      ['retrieve', () => other.responses.retrieve(done.id)],
      ['cancel', () => other.responses.cancel(hanging.id)],
    ] as const) {
      const missing = await call().catch((e: unknown) => e)
      t.type(missing, NotFoundError, `${name} by another key`)
      t.match((missing as APIError).error, {
        message: /no response resp_job_\S+ of this API key/,
        type: 'invalid_request_error',
        code: 'response_not_found',
      })
    }
  })

  t.test('a follow-up by previous_response_id continues the thread; one from an earlier response branches', async (t) => {
    const first = await openai.responses.create({ model, input: 'price of ETH' })
    const second = await openai.responses.create({
      model,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'and GMX?' }] }],
      previous_response_id: first.id,
    })
    t.match(second.output_text, priceOf('GMX'))
    t.equal(second.previous_response_id, first.id)
    t.equal(agentOf(second).threadId, agentOf(first).threadId, 'the same thread')
    t.not(agentOf(second).jobId, agentOf(first).jobId)

    const branch = await openai.responses.create({ model, input: 'and ARB?', previous_response_id: agentOf(first).jobId })
    t.match(branch.output_text, priceOf('ARB'))
    t.equal(branch.previous_response_id, first.id, 'named as a response id')
    t.not(agentOf(branch).threadId, agentOf(first).threadId, 'a new thread: the first one goes on with GMX')

    const unknown = await request('/v1/responses', {
      method: 'POST',
      key: writer.key,
      body: { model, input: 'hi', previous_response_id: 'resp_job_nothing' },
    })
    t.equal(unknown.status, 400)
    t.match(unknown.body, { error: { message: /no response resp_job_nothing of this API key/, param: 'previous_response_id' } })
  })

  t.test("bad input: 400 in OpenAI's shape, naming the param, and no job", async (t) => {
    const refused = await createKey('readwrite', 'refused')
    const cases: Array<[string, unknown, RegExp, string]> = [
      ['unknown model', { model: 'gpt-4o', input: 'hi' }, /the model 'gpt-4o' does not exist; models: ats-agent, ats-planner/, 'model'],
      ['no input', { model }, /Missing required params: input/, 'input'],
      ['empty input', { model, input: '  ' }, /input is empty/, 'input'],
      ['no items', { model, input: [] }, /input is empty/, 'input'],
      [
        'a function_call_output item',
        {
          model,
          input: [
            { role: 'user', content: 'hi' },
            { type: 'function_call_output', call_id: 'call_1', output: '{}' },
          ],
        },
        /input\[1\] is a function_call_output item: only message items/,
        'input[1].type',
      ],
      [
        'a bad role',
        { model, input: [{ role: 'wizard', content: 'hi' }] },
        /input\[0\].role must be one of user, assistant, system, developer/,
        'input[0].role',
      ],
      [
        'an image part',
        { model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] },
        /only text parts/,
        'input[0].content[0]',
      ],
      [
        "the last item is not the user's",
        {
          model,
          input: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: 'hello' },
          ],
        },
        /the last message must be a user message/,
        'input[1].role',
      ],
      ['client tools', { model, input: 'hi', tools: [{ type: 'function', name: 'f', parameters: {} }] }, /tools is not supported/, 'tools'],
      [
        'a json format',
        { model, input: 'hi', text: { format: { type: 'json_object' } } },
        /text.format json_object is not supported/,
        'text.format',
      ],
      [
        'stream in the background',
        { model, input: 'hi', stream: true, background: true },
        /stream with background is not supported/,
        'stream',
      ],
      [
        'too much metadata',
        { model, input: 'hi', metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) },
        /metadata must NOT have more than 16 properties/,
        'metadata',
      ],
      ['a prompt too long', { model, input: 'x'.repeat(4001) }, /a prompt is at most 4000/, 'input'],
    ]
    for (const [name, body, message, param] of cases) {
      const res = await request('/v1/responses', { method: 'POST', key: refused.key, body })
      t.equal(res.status, 400, name)
      t.match(res.body, { error: { message, type: 'invalid_request_error', param } }, name)
    }
    const thrown = await client(refused.key)
      .responses.create({ model, input: [{ type: 'function_call_output', call_id: 'call_1', output: '{}' }] })
      .catch((e: unknown) => e)
    t.type(thrown, BadRequestError, 'the openai client raises BadRequestError')
    t.match((thrown as APIError).message, /only message items/)
    t.same(await jobsOf(refused.key), [], 'no job for a refused request')
  })
}

// /v1/models and /v1/chat/completions
{
  /**
   * The /v1 group as OpenAI's own npm client sees it: pointed at the gateway with an API key,
   * unmodified. The agent behind it runs the real job pipeline on the devnet.
   */
  const { request, createKey, gateway, upstreams } = fleet
  const writer = await createKey('readwrite', 'openai client')
  const client = (key = writer.key, options: ConstructorParameters<typeof OpenAI>[0] = {}) =>
    new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0, ...options })
  const openai = client()
  const prompt = 'What is the price of ARB?'

  t.test("the models: OpenAI's list shape, and one model by id", async (t) => {
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
    t.match((missing as APIError).error, {
      message: /the model 'gpt-4o' does not exist; models: ats-agent, ats-planner/,
      type: 'invalid_request_error',
      code: 'model_not_found',
    })
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
    t.same(
      steps,
      [
        ['get_prices', 'started'],
        ['get_prices', 'finished'],
      ],
      'each step as it happens',
    )
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
      t.match(
        jobs.body.jobs.find((j: any) => j.id === trace.jobId),
        { status: 'complete', prompt, result: { text, toolCalls: ['get_prices'] } },
      )
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
    t.same(
      (completion as any).agent.tool_calls.map((c: any) => JSON.parse(c.function.arguments)),
      [{ symbols: ['GMX'] }],
    )
  })

  t.test("keys: none is 401, readonly is 403, a bad key 401, all in OpenAI's shape", async (t) => {
    const none = await request('/v1/models')
    t.equal(none.status, 401)
    t.match(none.body, { error: { message: /missing API key/, type: 'invalid_request_error', code: 'invalid_api_key', param: null } })
    const reader = await createKey('readonly', 'reader')
    const denied = await client(reader.key)
      .chat.completions.create({ model: 'ats-planner', messages: [{ role: 'user', content: prompt }] })
      .catch((e: unknown) => e)
    t.type(denied, PermissionDeniedError)
    t.match((denied as APIError).error, {
      message: /needs an API key of tier readwrite or higher; this key is readonly/,
      type: 'permission_error',
    })
    const wrong = await client('atsk_thisKeyDoesNotExist-000000000000')
      .models.list()
      .catch((e: unknown) => e)
    t.type(wrong, AuthenticationError)
    t.match((wrong as APIError).error, { code: 'invalid_api_key' })
  })

  t.test("bad bodies: 400 in OpenAI's shape, naming the field", async (t) => {
    const cases: Array<[string, unknown, RegExp, string | null, string | null]> = [
      ['no messages', { model: 'ats-planner' }, /Missing required params: messages/, 'messages', null],
      ['empty messages', { model: 'ats-planner', messages: [] }, /body\/messages must NOT have fewer than 1 items/, 'messages', null],
      [
        'unknown model',
        { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] },
        /the model 'gpt-4o' does not exist/,
        'model',
        'model_not_found',
      ],
      [
        'a bad role',
        { model: 'ats-planner', messages: [{ role: 'wizard', content: 'hi' }] },
        /body\/messages\/0\/role must be equal to one of the allowed values: system, developer, user, assistant, tool/,
        'messages[0].role',
        null,
      ],
      ['no model', { messages: [{ role: 'user', content: 'hi' }] }, /Missing required params: model/, 'model', null],
      [
        "the last message is not the user's",
        {
          model: 'ats-planner',
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: 'hello' },
          ],
        },
        /the last message must be a user message/,
        'messages[1].role',
        'invalid_request',
      ],
      [
        'an empty user message',
        { model: 'ats-planner', messages: [{ role: 'user', content: '  ' }] },
        /messages\[0\].content is empty/,
        'messages[0].content',
        'invalid_request',
      ],
      [
        'an image part',
        { model: 'ats-planner', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] },
        /only text parts/,
        'messages[0].content[0]',
        'invalid_request',
      ],
      [
        'client tools',
        { model: 'ats-planner', messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: { name: 'f' } }] },
        /tools is not supported/,
        'tools',
        'invalid_request',
      ],
      ['n = 2', { model: 'ats-planner', messages: [{ role: 'user', content: 'hi' }], n: 2 }, /body\/n must be <= 1/, 'n', null],
      [
        'a prompt too long',
        { model: 'ats-planner', messages: [{ role: 'user', content: 'x'.repeat(4001) }] },
        /a prompt is at most 4000/,
        'messages[0].content',
        'invalid_request',
      ],
    ]
    for (const [name, body, message, param, code] of cases) {
      const res = await request('/v1/chat/completions', { method: 'POST', key: writer.key, body })
      t.equal(res.status, 400, name)
      t.match(res.body, { error: { message, type: 'invalid_request_error', param, code } }, name)
    }
    const notJson = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${writer.key}`, 'content-type': 'application/json' },
      body: '{"model":',
    })
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
    t.match((refused as APIError).error, {
      type: 'requests',
      code: 'rate_limit_exceeded',
      message: /rate limit exceeded: 2 requests per 1 s/,
    })
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
}
