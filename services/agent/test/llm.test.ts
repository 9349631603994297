import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { keyHeaders, payerHeaders, startStack, waitForJob } from './helpers.ts'

interface ChatRequest {
  model: string
  messages: Array<{ role: string; content: string | null; tool_calls?: unknown[]; tool_call_id?: string }>
  tools: Array<{ type: string; function: { name: string; description: string; parameters: { type: string } } }>
}

/**
 * A local OpenAI-compatible chat-completions server that scripts tool calls: for a fresh user
 * message it asks for the tool calls `plan` gives; once the tools have answered it replies with
 * text built from their outputs (so the text proves the tools ran).
 */
async function startScriptedModel(t: Test, plan: (prompt: string) => Array<{ name: string; arguments: string }>) {
  const requests: Array<{ body: ChatRequest; authorization: string | undefined }> = []
  const server = createServer((req, res) => {
    let raw = ''
    req.on('data', (chunk) => (raw += chunk))
    req.on('end', () => {
      if (req.url !== '/v1/chat/completions' || req.method !== 'POST') {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'not found', type: 'invalid_request_error' } }))
        return
      }
      const body = JSON.parse(raw) as ChatRequest
      requests.push({ body, authorization: req.headers.authorization })
      const last = body.messages.at(-1)!
      const prompt = [...body.messages].reverse().find((m) => m.role === 'user')?.content ?? ''
      // "forever": the model never stops asking for tools (the step limit ends it)
      const asks = last.role === 'user' || prompt.includes('forever')
      const message =
        asks
          ? {
              role: 'assistant',
              content: null,
              tool_calls: plan(prompt).map((c, i) => ({ id: `call_${requests.length}_${i}`, type: 'function', function: c })),
            }
          : { role: 'assistant', content: `From the tools: ${body.messages.filter((m) => m.role === 'tool').map((m) => m.content).join(' | ')}` }
      res.writeHead(200, { 'content-type': 'application/json' })
      // usage as a provider reports it: a number the test can recognise in the sums
      const usage = { prompt_tokens: 1000 + body.messages.length, completion_tokens: 7 }
      res.end(JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: body.model, usage, choices: [{ index: 0, message, finish_reason: asks ? 'tool_calls' : 'stop' }] }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, requests }
}

t.test('with an LLM configured, the tool-calling loop runs the tools the model asks for and returns its text', async (t) => {
  const model = await startScriptedModel(t, (prompt) =>
    prompt.includes('unknown')
      ? [{ name: 'launch_rocket', arguments: '{}' }]
      : [
          { name: 'get_prices', arguments: JSON.stringify({ symbols: ['ETH'] }) },
          { name: 'quote_swap', arguments: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'ARB', amount: '1' }) },
        ],
  )
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
})
