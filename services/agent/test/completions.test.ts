import t, { type Test } from 'tap'
import { answerText, createLlmRunner } from '../src/runner/llm.ts'
import type { Toolbox } from '../src/runner/toolbox.ts'
import { startStandInModel, type StandInOptions } from '../src/testing/model.ts'

/** The LLM runner against a stand-in model, with a toolbox that answers every tool with its name and arguments. */
async function runWith(t: Test, options: StandInOptions, prompt = 'what is the price of ETH?') {
  const model = await startStandInModel(options)
  t.teardown(model.close)
  const called: Array<[string, unknown]> = []
  const toolbox = {
    call: async (name: string, args: unknown) => {
      called.push([name, args])
      return { ok: true, output: { tool: name, args } }
    },
    toolCalls: [],
    transactions: [],
    definitions: [],
  } as unknown as Toolbox
  const runner = createLlmRunner({ baseUrl: model.url, apiKey: undefined, model: 'stand-in', maxSteps: 3, timeoutMs: 5_000 })
  const pieces: string[] = []
  const run = runner.run({ jobId: 'job_1', prompt, history: [], owner: { kind: 'payer', address: '0x1' }, onText: (text) => pieces.push(text) }, toolbox, new AbortController().signal)
  return { model, called, pieces, run }
}

const pricesPlan: StandInOptions['plan'] = (_prompt, round) =>
  round === 0 ? { text: '  Let me look that up. ', calls: [{ name: 'get_prices', arguments: '{"symbols":["ETH"]}' }, { name: 'get_trending_pools', arguments: '{}' }] } : []

t.test('streamed tool-call deltas are put together and run; the text of every turn streams out and is the answer', async (t) => {
  const { model, called, pieces, run } = await runWith(t, { plan: pricesPlan })
  const result = await run
  t.same(called, [
    ['get_prices', { symbols: ['ETH'] }],
    ['get_trending_pools', {}],
  ])
  t.equal(result.text, 'Let me look that up.\n\nFrom the tools: {"tool":"get_prices","args":{"symbols":["ETH"]}} | {"tool":"get_trending_pools","args":{}}')
  t.equal(pieces.join(''), result.text, 'the streamed pieces are the answer, whitespace and all')
  t.ok(pieces.length > 4, 'in many pieces')
  t.same(
    model.requests.map((r) => [r.stream, r.body.stream_options]),
    [
      [true, { include_usage: true }],
      [true, { include_usage: true }],
    ],
  )
  t.same(result.usage, { promptTokens: 1002 + 1005, completionTokens: 14 }, "the model's own usage from the last chunk of each turn")
  t.same(model.requests[1]!.body.messages.slice(2).map((m) => m.role), ['assistant', 'tool', 'tool'])
  t.equal(model.requests[1]!.body.messages[2]!.content, '  Let me look that up. ', 'the model sees what it said')
})

t.test('a server that answers one JSON body to a stream request is read as before', async (t) => {
  const { called, pieces, run } = await runWith(t, { plan: pricesPlan, neverStreams: true })
  const result = await run
  t.equal(called.length, 2)
  t.match(result.text, /^Let me look that up\.\n\nFrom the tools: /)
  t.equal(pieces.join(''), result.text)
})

t.test('a failure before any text is retried; a stream cut after some text fails the run', async (t) => {
  const retried = await runWith(t, { fault: (i) => (i === 0 ? { status: 503 } : undefined) }, 'hello there')
  t.equal((await retried.run).text, 'You said: hello there')
  t.equal(retried.model.requests.length, 2, 'the 503 was retried')

  const cutInCalls = await runWith(t, { plan: (_prompt, round) => (round === 0 ? [{ name: 'get_prices', arguments: '{"symbols":["ETH"]}' }] : []), fault: (i) => (i === 0 ? { cutAfterTokens: 2 } : undefined) })
  t.match((await cutInCalls.run).text, /^From the tools: /)
  t.equal(cutInCalls.model.requests.length, 3, 'a stream cut in its tool calls (no text out yet) was retried')
  t.same(cutInCalls.called, [['get_prices', { symbols: ['ETH'] }]], 'and the tool ran once')

  const cut = await runWith(t, { fault: () => ({ cutAfterTokens: 2 }) }, 'hello there')
  await t.rejects(cut.run, { name: 'RunnerError', message: /^the language model's answer broke off: / })
  t.equal(cut.model.requests.length, 1, 'not retried: its text had gone out')
  t.same(cut.pieces, ['You', ' said:'], 'what went out before the cut (a space waits for the word after it)')
})

t.test('answerText: turns trimmed and joined by a blank line, whitespace held until text follows', async (t) => {
  const out: string[] = []
  const text = answerText((piece) => out.push(piece))
  for (const delta of ['\n', ' Hello', ' ', '', 'world ', '\n']) text.add(delta)
  text.endTurn()
  text.endTurn()
  for (const delta of ['  ', 'Second', ' turn.  ']) text.add(delta)
  t.equal(text.text, 'Hello world\n\nSecond turn.')
  t.same(out, ['Hello', ' world', '\n\nSecond', ' turn.'])
})
