import { randomBytes } from 'node:crypto'
import { type Automation, type CreateAutomationRequest, natsChannels } from '@ats/contracts'
import { BadRequest, addNatsService, serveEndpoint } from '@ats/service-kit'
import { connect } from 'nats'
import pino from 'pino'
import t, { type Test } from 'tap'
import { noApprovalWaits } from '../src/runner/approvals.ts'
import { answerText, createLlmRunner } from '../src/runner/llm.ts'
import { formatUsd, shareOf } from '../src/runner/orders.ts'
import { cannotDo, createPlanner, helpText, planOf } from '../src/runner/planner.ts'
import type { Toolbox } from '../src/runner/toolbox.ts'
import { type ToolRun, checkArguments, createTools } from '../src/runner/tools.ts'
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
    ['show my orders', [{ tool: 'list_automations', args: {} }]],
    ['sell 1 WETH for USDC', [{ tool: 'swap', args: { tokenIn: 'WETH', tokenOut: 'USDC', amount: '1' } }]],
    ['pause my automations', [{ tool: 'list_automations', args: {} }]],
    ['resume automation aut_42', [{ tool: 'set_automation_status', args: { id: 'aut_42', status: 'active' } }]],
  ]
  for (const [prompt, calls] of cases) t.same(callsOf(prompt), calls, prompt)
})

t.test('orders in plain words become create_order calls; a swap stays a swap', async (t) => {
  const order = (args: Record<string, unknown>) => [{ tool: 'create_order', args }]
  const weth = { tokenIn: 'WETH', tokenOut: 'USDC' }
  const cases: Array<[string, unknown]> = [
    ['sell half my WETH if ETH drops below 2,500', order({ type: 'stop-loss', ...weth, percentOfBalance: 50, stopPrice: 2500 })],
    ['set a stop-loss on 0.5 WETH at 2500', order({ type: 'stop-loss', ...weth, amount: '0.5', stopPrice: 2500 })],
    [
      'Set a stop loss on 0.5 WETH at $2,500 into USDT',
      order({ type: 'stop-loss', ...weth, tokenOut: 'USDT', amount: '0.5', stopPrice: 2500 }),
    ],
    ['sell 1 WETH for ARB if ETH falls below $2.5k', order({ type: 'stop-loss', ...weth, tokenOut: 'ARB', amount: '1', stopPrice: 2500 })],
    [
      'sell 25% of my ARB if ARB drops under $0.80',
      order({ type: 'stop-loss', tokenIn: 'ARB', tokenOut: 'USDC', percentOfBalance: 25, stopPrice: 0.8 }),
    ],
    ['take profit on 1 WETH at 4,000', order({ type: 'take-profit', ...weth, amount: '1', takeProfitPrice: 4000 })],
    ['sell 1 WETH if ETH rises above 4000', order({ type: 'take-profit', ...weth, amount: '1', takeProfitPrice: 4000 })],
    [
      'sell 1 WETH if ETH drops below 2500 or rises above 4000',
      order({ type: 'stop-loss', ...weth, amount: '1', stopPrice: 2500, takeProfitPrice: 4000 }),
    ],
    [
      'stop-loss at 2,500 and take profit at 4,000 on 1 WETH',
      order({ type: 'stop-loss', ...weth, amount: '1', stopPrice: 2500, takeProfitPrice: 4000 }),
    ],
    ['trailing stop of 10% on 0.5 WETH', order({ type: 'trailing-stop', ...weth, amount: '0.5', trailPercent: 10 })],
    ['trail 0.5 WETH by $200', order({ type: 'trailing-stop', ...weth, amount: '0.5', trailAmount: 200 })],
    ['trailing stop on half my WETH by 5%', order({ type: 'trailing-stop', ...weth, percentOfBalance: 50, trailPercent: 5 })],
    [
      'twap 1000 USDC into WETH over 1 hour in 10 slices',
      order({ type: 'twap', tokenIn: 'USDC', tokenOut: 'WETH', amount: '1000', duration: '1h', slices: 10 }),
    ],
    [
      'buy WETH with 1000 USDC over 2 hours',
      order({ type: 'twap', tokenIn: 'USDC', tokenOut: 'WETH', amount: '1000', duration: '2h', slices: 10 }),
    ],
    [
      'sell all my ARB for USDC over the next 30 minutes, one slice every 5 minutes',
      order({ type: 'twap', tokenIn: 'ARB', tokenOut: 'USDC', percentOfBalance: 100, duration: '30m', interval: '5m' }),
    ],
    ['twap 500 USDC into LINK', order({ type: 'twap', tokenIn: 'USDC', tokenOut: 'LINK', amount: '500', slices: 10 })],
    // not an order: what a stop order watches is the price of what it sells
    ['sell 1 ARB if ETH drops below 2500', []],
    // managing orders is not making one
    ['pause my stop-loss automations', [{ tool: 'list_automations', args: {} }]],
    ['sell 0.1 WETH for USDC on uniswap', [{ tool: 'swap', args: { ...weth, amount: '0.1', dex: 'uniswap' } }]],
  ]
  for (const [prompt, calls] of cases) t.same(callsOf(prompt), calls, prompt)
})

t.test('an order: what was created in plain words, or why not', async (t) => {
  const calls: Array<[string, unknown]> = []
  const wallet = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'
  const view = (type: string, config: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    id: 'aut_7',
    name: 'an order',
    type,
    status: 'active',
    walletAddress: wallet,
    source: 'server',
    config,
    state: null,
    statusReason: null,
    ...extra,
  })
  let created: { ok: boolean; output?: unknown; error?: string } = { ok: false, error: 'not scripted' }
  const toolbox = {
    call: async (name: string, args: unknown) => {
      calls.push([name, args])
      return created
    },
    toolCalls: [],
    transactions: [],
    definitions: [],
  } as unknown as Toolbox
  const run = async (prompt: string) =>
    (
      await createPlanner().run(
        { jobId: 'job_1', prompt, history: [], owner: { kind: 'payer', address: wallet } },
        toolbox,
        new AbortController().signal,
      )
    ).text

  created = {
    ok: true,
    output: {
      automation: view('stop-loss', { tokenIn: 'WETH', tokenOut: 'USDC', amount: '750000000000000000', stopPrice: 2500 }),
      amountFormatted: '0.75',
      summary: 'sells 0.75 WETH for USDC when ETH is at or below $2,500.00',
    },
  }
  t.equal(
    await run('sell half my WETH if ETH drops below 2,500'),
    `Created a stop-loss (aut_7): it sells 0.75 WETH for USDC when ETH is at or below $2,500.00. The server wallet pays; what it buys goes to ${wallet}. Status: active.`,
  )
  created = {
    ok: true,
    output: {
      automation: view(
        'twap',
        { tokenIn: 'USDC', tokenOut: 'WETH', amount: '1000000000', duration: '1h', slices: 10 },
        { source: 'wallet' },
      ),
      amountFormatted: '1000',
      summary: 'swaps 1000 USDC for WETH in 10 slices over 1h',
    },
  }
  t.equal(
    await run('twap 1000 USDC into WETH over 1 hour in 10 slices'),
    `Created a TWAP (aut_7): it swaps 1000 USDC for WETH in 10 slices over 1h. It pays from your wallet ${wallet}, under its grant. Status: active.`,
  )
  created = { ok: false, error: "config.stopPrice 3000 is at or above ETH's price 2950: the stop-loss would sell at once" }
  t.equal(
    await run('set a stop-loss on 0.5 WETH at 3000'),
    "I couldn't create the stop-loss: config.stopPrice 3000 is at or above ETH's price 2950: the stop-loss would sell at once.",
    "the automation service's refusal, passed on",
  )
  created = { ok: false, error: 'a share of a balance cannot be read here: give the amount of WETH in whole tokens' }
  t.equal(
    await run('trailing stop of 10% on half my WETH'),
    "I couldn't create the trailing stop: a share of a balance cannot be read here: give the amount of WETH in whole tokens.",
  )
  t.equal(calls.length, 4)

  t.equal(
    await run('sell 1 ARB if ETH drops below 2500'),
    'A stop order watches the price of the token it sells: selling ARB, it would watch ARB, not ETH. Nothing was created.',
  )
  t.equal(calls.length, 4, 'and no tool was called')

  created = {
    ok: true,
    output: {
      automations: [
        view(
          'stop-loss',
          {},
          { id: 'aut_1', name: 'Stop-loss 0.5 WETH for USDC', summary: 'sells 0.5 WETH for USDC when ETH is at or below $2,500.00' },
        ),
        view(
          'twap',
          {},
          {
            id: 'aut_2',
            name: 'TWAP 1000 USDC for WETH',
            status: 'completed',
            statusReason: 'the TWAP made its 10 slices',
            summary: 'swaps 1000 USDC for WETH in 10 slices over 1h; 10 slices done, 1000 USDC swapped',
          },
        ),
      ],
    },
  }
  t.equal(
    await run('show my orders'),
    [
      'Your automations:',
      '- Stop-loss 0.5 WETH for USDC (stop-loss, aut_1, active): sells 0.5 WETH for USDC when ETH is at or below $2,500.00',
      '- TWAP 1000 USDC for WETH (TWAP, aut_2, completed): swaps 1000 USDC for WETH in 10 slices over 1h; 10 slices done, 1000 USDC swapped (the TWAP made its 10 slices)',
    ].join('\n'),
  )
})

t.test('create_order and list_automations over NATS, against stand-ins for trading and automation', async (t) => {
  const nc = await connect({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222' })
  t.teardown(() => nc.drain())
  const channels = natsChannels(`orders${randomBytes(4).toString('hex')}`)
  const log = pino({ level: 'silent' })
  const wallet = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'
  const [weth, usdc, arb] = [
    { symbol: 'WETH', address: '0x82aF49447D8a07e3bd95BD0d56f35241523fBab1', decimals: 18 },
    { symbol: 'USDC', address: '0xaf88d065e77c8cC2239327C5EDb3A432268e5831', decimals: 6 },
    { symbol: 'ARB', address: '0x912CE59144191C1204E64559FE8253a0e49E6548', decimals: 18 },
  ]
  const grant = (tokenIn: string, status: 'active' | 'revoked') => ({
    id: `0x${'ab'.repeat(32)}`,
    wallet,
    status,
    tokenIn,
    tokensOut: ['USDC'],
    dexes: ['uniswap' as const],
    amountPerPeriod: '1000000000000000000',
    periodSeconds: 86_400,
    remaining: '1000000000000000000',
    renewsAt: '2030-01-01T00:00:00.000Z',
    expiresAt: '2030-01-01T00:00:00.000Z',
    allowance: '1000000000000000000',
  })
  const created: CreateAutomationRequest[] = []
  const listed: Automation[] = []
  const service = await addNatsService(nc, 'orders-stand-ins', '0.0.1', 'trading and automation, as the tools see them')
  t.teardown(() => service.stop())
  serveEndpoint(service, channels.trading.tokens, log, async () => ({ chainId: 42161, tokens: [weth, usdc, arb] }))
  // the wallet granted the service swaps of WETH; its ARB grant was revoked
  serveEndpoint(service, channels.trading.grants, log, async (q) => ({
    wallet: q.wallet,
    contract: usdc.address,
    delegate: usdc.address,
    grants: [grant('WETH', 'active'), grant('ARB', 'revoked')],
  }))
  serveEndpoint(service, channels.automation.create, log, async (request) => {
    created.push(request)
    if (request.type === 'stop-loss' && request.config.stopPrice === undefined) {
      throw new BadRequest('config.stopPrice is required: a price in USD per whole token, a positive number (2500.5)')
    }
    const automation = {
      ...{ id: `aut_${created.length}`, name: request.name, type: request.type, status: 'active' as const },
      ...{ walletAddress: request.walletAddress, source: request.source ?? ('server' as const), config: request.config, state: null },
      ...{ createdAt: 1, updatedAt: 1, nextRunAt: 1, runs: 0, statusReason: null },
    }
    return { automation }
  })
  serveEndpoint(service, channels.automation.list, log, async () => ({ automations: listed }))
  const balances: Record<string, bigint> = { [weth.address]: 1_500_000_000_000_000_000n, [arb.address]: 0n }
  serveEndpoint(service, channels.trading.balance, log, async (q) => {
    t.equal(q.wallet, wallet, "the caller's wallet's balance")
    return { token: q.token, balance: String(balances[q.token] ?? 0n) }
  })

  const tools = createTools({ nc, channels, timeoutMs: 5_000, swapTimeoutMs: 5_000 })
  const toolRun: ToolRun = {
    jobId: 'job_1',
    step: 1,
    key: 'job:job_1:step:1',
    owner: { kind: 'payer', address: wallet },
    signal: new AbortController().signal,
    approvals: noApprovalWaits,
  }
  const run = async (name: string, args: Record<string, unknown>) => {
    const tool = tools.byName.get(name)!
    checkArguments(tool, args)
    return (await tool.run(args as never, toolRun)).output as any
  }

  const half = await run('create_order', { type: 'stop-loss', tokenIn: 'WETH', tokenOut: 'USDC', percentOfBalance: 50, stopPrice: 2500 })
  t.same(created.at(-1), {
    walletAddress: wallet,
    type: 'stop-loss',
    source: 'wallet',
    name: 'Stop-loss 0.75 WETH for USDC',
    config: { tokenIn: 'WETH', tokenOut: 'USDC', amount: '750000000000000000', stopPrice: 2500 },
  })
  t.match(half, { amountFormatted: '0.75', summary: 'sells 0.75 WETH for USDC when ETH is at or below $2,500.00' })

  const twap = await run('create_order', { type: 'twap', tokenIn: 'usdc', tokenOut: 'WETH', amount: '1000', duration: '1h', slices: 10 })
  t.match(created.at(-1), {
    source: 'server',
    name: 'TWAP 1000 USDC for WETH',
    config: { tokenIn: 'USDC', tokenOut: 'WETH', amount: '1000000000', duration: '1h', slices: 10 },
  })
  t.equal(twap.summary, 'swaps 1000 USDC for WETH in 10 slices over 1h', 'no grant of USDC: the server wallet pays')

  const refusals: Array<[string, Record<string, unknown>, string]> = [
    [
      'the automation service refuses',
      { type: 'stop-loss', tokenIn: 'WETH', tokenOut: 'USDC', amount: '1' },
      'config.stopPrice is required: a price in USD per whole token, a positive number (2500.5)',
    ],
    [
      'a share of nothing',
      { type: 'trailing-stop', tokenIn: 'ARB', tokenOut: 'USDC', percentOfBalance: 100, trailPercent: 5 },
      `100% of the 0 ARB that ${wallet} holds is nothing to sell`,
    ],
    [
      'both amounts',
      { type: 'take-profit', tokenIn: 'WETH', tokenOut: 'USDC', amount: '1', percentOfBalance: 50, takeProfitPrice: 4000 },
      'an order takes its amount in whole tokens (amount) or as a share of your balance (percentOfBalance): one of the two',
    ],
  ]
  for (const [what, args, message] of refusals) {
    await t.rejects(run('create_order', args), { name: 'ToolError', message }, what)
  }
  t.throws(
    () => checkArguments(tools.byName.get('create_order')!, { type: 'limit-order', tokenIn: 'WETH', tokenOut: 'USDC', amount: '1' }),
    {
      name: 'ToolError',
    },
  )

  listed.push(
    {
      ...half.automation,
      state: { price: 3012.45, priceAt: 1 },
    },
    {
      ...half.automation,
      id: 'aut_9',
      type: 'trailing-stop',
      config: { tokenIn: 'WETH', tokenOut: 'USDC', amount: '500000000000000000', trailPercent: 10, takeProfitPrice: 4000 },
      state: { price: 3100, priceAt: 1, highestPrice: 3200, stopPrice: 2880 },
    },
    { ...twap.automation, state: { slicesDone: 3, filled: '300000000', carried: '0', skipped: 0, windowEndsAt: 2 } },
    { ...twap.automation, type: 'recurring-buy', config: { tokenIn: 'PEPE', tokenOut: 'WETH', amount: '5', interval: '1d' } },
  )
  const { automations } = await run('list_automations', {})
  t.same(
    automations.map((a: { summary: string }) => a.summary),
    [
      'sells 0.75 WETH for USDC when ETH is at or below $2,500.00 (ETH last $3,012.45)',
      'sells 0.5 WETH for USDC when ETH falls 10% below its highest price since it was created or is at or above $4,000.00 (ETH last $3,100.00, highest $3,200.00, stop now at $2,880.00)',
      'swaps 1000 USDC for WETH in 10 slices over 1h; 3 slices done, 300 USDC swapped',
      'buys WETH with 5 base units of PEPE every 1d',
    ],
  )
  t.match(automations[1], { id: 'aut_9', type: 'trailing-stop', state: { highestPrice: 3200 } }, 'the view as the service gave it')
})

t.test('shareOf: a share of a balance in base units, rounded down', async (t) => {
  t.equal(shareOf(1_500_000_000_000_000_000n, 50), 750_000_000_000_000_000n)
  t.equal(shareOf(3n, 50), 1n)
  t.equal(shareOf(1_000_000n, 100), 1_000_000n)
  t.equal(shareOf(1_000_000n, 33.33), 333_300n)
  t.equal(shareOf(1_000_000n, 0.01), 100n)
  t.throws(() => shareOf(1n, 0), RangeError)
  t.throws(() => shareOf(1n, 100.5), RangeError)
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
    'sell half my WETH if ETH drops below 2,500',
    'take profit on 1 WETH at 4,000',
    'trailing stop of 10% on 0.5 WETH',
    'twap 1000 USDC into WETH over 1 hour in 10 slices',
    'show my orders',
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
