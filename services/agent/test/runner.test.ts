import t, { type Test } from 'tap'
import { answerText, createLlmRunner } from '../src/runner/llm.ts'
import { cannotDo, createPlanner, formatUsd, helpText, planOf } from '../src/runner/planner.ts'
import type { Toolbox } from '../src/runner/toolbox.ts'
import { type StandInOptions, startStandInModel } from '../src/testing/model.ts'

// The runners on their own: the offline planner, and the language-model runner against a
// stand-in model.

const callsOf = (prompt: string, history: Array<{ role: string; content: string }> = []) => {
  const plan = planOf(prompt, history)
  return plan.intent === null ? null : plan.calls
}

t.test('everyday requests become the tool calls with the arguments the tools declare', async (t) => {
  const cases: Array<[string, unknown]> = [
    ["What's the price of ETH?", [{ tool: 'get_prices', args: { symbols: ['ETH'] } }]],
    ['price of btc and arb?', [{ tool: 'get_prices', args: { symbols: ['BTC', 'ARB'] } }]],
    ['how much is LINK', [{ tool: 'get_prices', args: { symbols: ['LINK'] } }]],
    ['WETH price', [{ tool: 'get_prices', args: { symbols: ['ETH'] } }]],
    ['prices', [{ tool: 'get_prices', args: {} }]],
    ["what's hot", [{ tool: 'get_trending_pools', args: {} }]],
    ['show me the trending pools', [{ tool: 'get_trending_pools', args: {} }]],
    ['quote 1 USDC for ARB', [{ tool: 'quote_swap', args: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1' } }]],
    [
      'quote 0.5 eth to usdc on Camelot',
      [{ tool: 'quote_swap', args: { tokenIn: 'ETH', tokenOut: 'USDC', amount: '0.5', dex: 'camelot' } }],
    ],
    ['how much ARB would I get for 100 USDC?', [{ tool: 'quote_swap', args: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '100' } }]],
    ['swap 1 USDC for ARB', [{ tool: 'swap', args: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1' } }]],
    ['sell 0.1 WETH for USDC on uniswap', [{ tool: 'swap', args: { tokenIn: 'WETH', tokenOut: 'USDC', amount: '0.1', dex: 'uniswap' } }]],
    ['buy ARB with 5 USDC', [{ tool: 'swap', args: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '5' } }]],
    ['show my positions', [{ tool: 'get_positions', args: {} }]],
    [
      'positions of 0x70997970C51812dc3A010C7d01b50e0d17dc79C8',
      [{ tool: 'get_positions', args: { address: '0x70997970C51812dc3A010C7d01b50e0d17dc79C8' } }],
    ],
    ['my NFTs', [{ tool: 'list_nfts', args: {} }]],
    [
      'what NFTs does 0x70997970C51812dc3A010C7d01b50e0d17dc79C8 own, including spam',
      [{ tool: 'list_nfts', args: { address: '0x70997970C51812dc3A010C7d01b50e0d17dc79C8', includeHidden: true } }],
    ],
    ['prediction markets about the US election', [{ tool: 'find_predictions', args: { query: 'US election' } }]],
    ['top prediction markets', [{ tool: 'find_predictions', args: {} }]],
    ['bridge 100 USDC to Base', [{ tool: 'bridge_quote', args: { token: 'USDC', amount: '100', toChain: 'Base' } }]],
    [
      'buy 1 USDC of ARB every hour',
      [{ tool: 'create_automation', args: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1', interval: '1h' } }],
    ],
    [
      'every day, buy 10 usdc worth of eth',
      [{ tool: 'create_automation', args: { tokenIn: 'USDC', tokenOut: 'ETH', amount: '10', interval: '1d' } }],
    ],
    ['list my automations', [{ tool: 'list_automations', args: {} }]],
    ['pause my automations', [{ tool: 'list_automations', args: {} }]],
    ['resume automation aut_42', [{ tool: 'set_automation_status', args: { id: 'aut_42', status: 'active' } }]],
  ]
  for (const [prompt, calls] of cases) t.same(callsOf(prompt), calls, prompt)
})

t.test("follow-ups re-run the thread's last request with what changed", async (t) => {
  const asked = (content: string) => [
    { role: 'user', content },
    { role: 'assistant', content: 'an answer' },
  ]
  t.same(callsOf('and BTC?', asked('price of ETH')), [{ tool: 'get_prices', args: { symbols: ['BTC'] } }])
  t.same(callsOf('what about GMX', asked('quote 1 USDC for ARB')), [
    { tool: 'quote_swap', args: { tokenIn: 'USDC', tokenOut: 'GMX', amount: '1' } },
  ])
  t.same(callsOf('how about on camelot?', asked('quote 1 USDC for ARB')), [
    { tool: 'quote_swap', args: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1', dex: 'camelot' } },
  ])
  t.same(callsOf('and 0x70997970C51812dc3A010C7d01b50e0d17dc79C8?', asked('my NFTs')), [
    { tool: 'list_nfts', args: { address: '0x70997970C51812dc3A010C7d01b50e0d17dc79C8' } },
  ])
  t.same(callsOf('and ethereum?', asked('prediction markets about bitcoin')), [{ tool: 'find_predictions', args: { query: 'ethereum' } }])
  t.same(
    callsOf('and BTC?', [...asked('price of ETH'), ...asked('write a poem')]),
    [{ tool: 'get_prices', args: { symbols: ['BTC'] } }],
    'skips requests it could not do',
  )
  t.equal(callsOf('and BTC?'), null, 'a follow-up without a thread is not understood')
})

t.test('anything else gets "I can\'t do that yet" with what it can do', async (t) => {
  const plan = planOf('write me a poem')
  t.same(plan, { intent: null, text: cannotDo })
  t.match(cannotDo, /^I can't do that yet\. I can answer:\n/)
  for (const example of [
    'price of ETH',
    'trending pools',
    'quote 1 USDC for ARB',
    'swap 1 USDC for ARB',
    'my positions',
    'NFTs of 0x',
    'prediction markets about bitcoin',
    'bridge 100 USDC to Base',
    'buy 1 USDC of ARB every day',
    'pause my automations',
  ]) {
    t.ok(cannotDo.includes(example), example)
  }
})

t.test('a help question gets the list of what it can do, without a tool call', async (t) => {
  for (const prompt of [
    'What can you do?',
    'help',
    'what are your skills',
    'What tools do you have?',
    'how can you help me?',
    'what are your tools?',
  ]) {
    t.same(planOf(prompt), { intent: null, text: helpText }, prompt)
  }
  t.match(helpText, /^I can answer:\n- the price of a token: "what is the price of ETH\?"\n/)
  t.notOk(helpText.includes("can't"), 'not a refusal')
  t.same(
    callsOf('help me swap 1 USDC for ARB'),
    [{ tool: 'swap', args: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1' } }],
    'a request that asks for help with something is that request',
  )
  const toolbox = { call: async () => t.fail('no tool is called'), toolCalls: [], transactions: [], definitions: [] } as unknown as Toolbox
  const answer = await createPlanner().run(
    { jobId: 'job_1', prompt: 'what can you do?', history: [], owner: { kind: 'payer', address: '0x1' } },
    toolbox,
    new AbortController().signal,
  )
  t.equal(answer.text, helpText)
})

t.test('formatUsd: two decimals with separators from $1, four significant digits below', async (t) => {
  t.equal(formatUsd(3012.449), '$3,012.45')
  t.equal(formatUsd(1), '$1.00')
  t.equal(formatUsd(0.5), '$0.5')
  t.equal(formatUsd(0.000123456), '$0.0001235')
  t.equal(formatUsd(0), '$0.00')
})

t.test('pause all: lists, then pauses each active automation; a failed tool is said plainly', async (t) => {
  const calls: Array<[string, unknown]> = []
  const answers: Record<string, (args: any) => any> = {
    list_automations: () => ({
      ok: true,
      output: {
        automations: [
          { id: 'aut_1', name: 'Daily ARB', status: 'active' },
          { id: 'aut_2', name: 'Old', status: 'paused' },
          { id: 'aut_3', name: 'Hourly ETH', status: 'active' },
        ],
      },
    }),
    set_automation_status: (args) =>
      args.id === 'aut_3'
        ? { ok: false, error: 'automation aut_3 not found' }
        : { ok: true, output: { automation: { id: args.id, name: 'Daily ARB', status: args.status } } },
    get_prices: () => ({ ok: false, error: 'the market-data service is not available right now' }),
    get_trending_pools: () => ({ ok: false, error: 'market-data answered 502', serviceFault: true }),
  }
  // the toolbox's interface, answering from the table above
  const toolbox = {
    call: async (name: string, args: unknown) => {
      calls.push([name, args])
      return answers[name]!(args)
    },
    toolCalls: [],
    transactions: [],
    definitions: [],
  } as unknown as Toolbox
  const run = (prompt: string) =>
    createPlanner().run(
      { jobId: 'job_1', prompt, history: [], owner: { kind: 'payer', address: '0x1' } },
      toolbox,
      new AbortController().signal,
    )
  const paused = await run('pause my automations')
  t.same(calls, [
    ['list_automations', {}],
    ['set_automation_status', { id: 'aut_1', status: 'paused' }],
    ['set_automation_status', { id: 'aut_3', status: 'paused' }],
  ])
  t.equal(paused.text, 'Paused: Daily ARB (aut_1, paused); Hourly ETH (aut_3): automation aut_3 not found.')
  t.equal((await run('price of ETH')).text, "I couldn't get the prices: the market-data service is not available right now.")
  // a failure of ours (serviceFault) fails the run instead: a paid job's payment is then voided
  await t.rejects(run('show trending pools'), {
    name: 'RunnerError',
    message: 'the get_trending_pools step failed: market-data answered 502',
  })
})

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
  const run = runner.run(
    { jobId: 'job_1', prompt, history: [], owner: { kind: 'payer', address: '0x1' }, onText: (text) => pieces.push(text) },
    toolbox,
    new AbortController().signal,
  )
  return { model, called, pieces, run }
}

const pricesPlan: StandInOptions['plan'] = (_prompt, round) =>
  round === 0
    ? {
        text: '  Let me look that up. ',
        calls: [
          { name: 'get_prices', arguments: '{"symbols":["ETH"]}' },
          { name: 'get_trending_pools', arguments: '{}' },
        ],
      }
    : []

t.test('streamed tool-call deltas are put together and run; the text of every turn streams out and is the answer', async (t) => {
  const { model, called, pieces, run } = await runWith(t, { plan: pricesPlan })
  const result = await run
  t.same(called, [
    ['get_prices', { symbols: ['ETH'] }],
    ['get_trending_pools', {}],
  ])
  t.equal(
    result.text,
    'Let me look that up.\n\nFrom the tools: {"tool":"get_prices","args":{"symbols":["ETH"]}} | {"tool":"get_trending_pools","args":{}}',
  )
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
  t.same(
    model.requests[1]!.body.messages.slice(2).map((m) => m.role),
    ['assistant', 'tool', 'tool'],
  )
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

  const cutInCalls = await runWith(t, {
    plan: (_prompt, round) => (round === 0 ? [{ name: 'get_prices', arguments: '{"symbols":["ETH"]}' }] : []),
    fault: (i) => (i === 0 ? { cutAfterTokens: 2 } : undefined),
  })
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
