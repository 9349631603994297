import t from 'tap'
import { startStandInModel, type StandInRequest } from '../src/testing/model.ts'
import { keyHeaders, payerHeaders, startStack, waitForJob } from './helpers.ts'

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
      const field = (name: string) => block.split('\n').find((line) => line.startsWith(`${name}: `))?.slice(name.length + 2)
      const data = field('data')
      if (data === undefined) continue
      const id = field('id')
      const frame: SseFrame = { ...(id === undefined ? {} : { id }), event: field('event') ?? 'message', data: data === '[DONE]' ? data : JSON.parse(data), at: Date.now() }
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
  prompt.includes('quietly') ? 'Markets are calm today and nothing needs doing: the prices are steady, your positions are safe, and no automation is due.' : `From the tools: ${outputs.join(' | ')}`

t.test('with an LLM configured, the tool-calling loop runs the tools the model asks for and returns its text', async (t) => {
  // the stand-in holds an answer while `held` is pending, and streams a token every 15 ms
  let held: Promise<void> | undefined
  const model = await startStandInModel({ plan, answer, tokenDelayMs: 15, gate: () => held })
  t.teardown(model.close)
  const stack = await startStack(t, { agentEnv: { LLM_BASE_URL: model.url, LLM_API_KEY: 'sk-test-key', LLM_MODEL: 'scripted-1', LLM_MAX_STEPS: '3' } })
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
    ['get_prices', 'get_trending_pools', 'quote_swap', 'swap', 'get_positions', 'list_nfts', 'find_predictions', 'bridge_quote', 'create_automation', 'list_automations', 'set_automation_status'],
  )
  for (const tool of firstTurn!.body.tools) t.equal(tool.function.parameters.type, 'object', `${tool.function.name} has a JSON Schema`)
  t.same(firstTurn!.body.messages.map((m) => m.role), ['system', 'system', 'user'])
  t.match(firstTurn!.body.messages[1]!.content, /"locale":"en-GB"/, 'the context is handed to the model')
  t.same(secondTurn!.body.messages.map((m) => m.role), ['system', 'system', 'user', 'assistant', 'tool', 'tool'])

  t.test('a follow-up gives the model the thread so far; an unknown tool answers the model an error', async (t) => {
    const follow = await prompt({ prompt: 'unknown tool please', threadId: accepted.body.threadId })
    const second = await waitForJob(stack.call, payer, follow.body.jobId)
    t.equal(second.status, 'complete')
    t.same(second.result.toolCalls, ['launch_rocket'])
    t.match(second.result.text, /no tool named launch_rocket/)
    const firstOfFollowUp = model.requests[2]!.body.messages
    t.same(firstOfFollowUp.map((m) => m.role), ['system', 'user', 'assistant', 'user'])
    t.equal(firstOfFollowUp[2]!.content, job.result.text, 'the earlier answer is in the history')
  })

  t.test('/v1: ats-agent runs the model with the system messages and sums its usage; ats-planner skips it; a failed job is a 500 not to retry', async (t) => {
    const key = keyHeaders('key_v1llm', 'readwrite')
    const chat = (body: unknown) => stack.call('/v1/chat/completions', { body, headers: key })
    const before = model.requests.length
    const answer = await chat({ model: 'ats-agent', messages: [{ role: 'system', content: 'Answer in French.' }, { role: 'user', content: 'How much is ETH?' }] })
    t.equal(answer.status, 200, JSON.stringify(answer.body))
    t.match(answer.body.choices[0].message.content, /^From the tools: /)
    const turns = model.requests.slice(before)
    t.equal(turns.length, 2)
    t.match(turns[0]!.body.messages[1], { role: 'system', content: 'Instructions from the caller: Answer in French.' })
    // what the model reported, summed over its two turns (3 and 6 messages sent)
    t.same(answer.body.usage, { prompt_tokens: 1003 + 1006, completion_tokens: 14, total_tokens: 2023 })
    t.same(answer.body.agent.tool_calls.map((c: any) => c.function.name), ['get_prices', 'quote_swap'])

    const planned = await chat({ model: 'ats-planner', messages: [{ role: 'user', content: 'price of ETH' }] })
    t.match(planned.body.choices[0].message.content, /^ETH: \$/)
    t.equal(model.requests.length, before + 2, 'the planner answered without the model')

    const failed = await chat({ model: 'ats-agent', messages: [{ role: 'user', content: 'ask for tools forever' }] })
    t.equal(failed.status, 500)
    t.equal(failed.headers.get('x-should-retry'), 'false', "OpenAI's clients do not retry it")
    t.same(failed.body, {
      error: { message: 'the agent could not answer: the model did not reach an answer within 3 steps (LLM_MAX_STEPS)', type: 'server_error', param: null, code: 'job_failed' },
    })
  })

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
    t.ok(frames.slice(0, firstStep).some((f) => f.data.choices[0]?.delta?.content), 'the first turn\'s text came before the tools ran')
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
    t.ok(deltas.every((f) => f.id === undefined), 'deltas have no id')
    t.ok(frames.filter((f) => f.event !== 'delta').every((f) => f.id !== undefined), 'stored events do')
    t.same(deltas.map((f) => f.data.offset), deltas.map((f) => f.data.offset).sort((a, b) => a - b), 'in order')
    t.equal(deltas.map((f) => f.data.text).join(''), complete.data.result.text, "joined, the deltas are the job's text")
    t.ok(deltas[0]!.data.offset === 0 && deltas.every((f, i) => i === 0 || f.data.offset === deltas[i - 1]!.data.offset + deltas[i - 1]!.data.text.length), 'each starts where the one before ended')

    const again = await resumed!
    t.ok(again.length > 0 && again.every((f) => f.event !== 'delta' && f.id !== undefined), 'the resumed stream has stored events only')
    t.equal(again.at(-1)!.data.result.text, complete.data.result.text, 'and the text in its complete event')
    t.ok(again.every((f) => Number(f.id) > Number(resumedAfter)), 'after the id it gave')

    const replay = await fetch(url, { headers: payerHeaders(payer) }).then((res) => readFrames(res))
    t.same(
      replay.map((f) => f.event),
      frames.filter((f) => f.event !== 'delta').map((f) => f.event),
      'read again later: the same stored events, no deltas',
    )
  })
})
