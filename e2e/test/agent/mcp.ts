import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import t, { type Test } from 'tap'
import { adminKey, startAgentFleet } from '../fleet.ts'

/** The MCP server of the gateway (POST /mcp) as the official MCP client sees it, on one fleet over the devnet. */
// keyless /mcp messages count against the paid limit per client address: a small one, reached last
const perAddress = 30
t.test("the agent's tools over MCP with a key", async (t) => {
  const fleet = await startAgentFleet(t, {
    automationEnv: { AUTOMATION_MIN_INTERVAL_MS: '60000' },
    gatewayEnv: { PAID_RATE_LIMIT_PER_ADDRESS: String(perAddress) },
  })
  const { request, createKey, gateway, devnet } = fleet
  const reader = await createKey('readonly', 'mcp reader')

  const readTools = [
    'get_prices',
    'get_trending_pools',
    'get_positions',
    'get_nfts',
    'get_top_predictions',
    'search_predictions',
    'get_prediction',
    'get_bridge_quote',
    'get_bridge_chains',
    'list_jobs',
  ]
  const writeTools = [
    'get_swap_quote',
    'prepare_swap',
    'execute_swap',
    'list_swap_executions',
    'list_approvals',
    'get_approval',
    'approve_swap',
    'reject_swap',
    'create_automation',
    'list_automations',
    'pause_automation',
    'resume_automation',
    'agent_prompt',
    'agent_get_job',
    'agent_cancel_job',
  ]
  const paidTools = ['agent_prompt', 'agent_get_job', 'agent_cancel_job', 'agent_skills']

  /** An MCP client connected to the gateway, with `key` as its bearer token when given. */
  async function connect(t: Test, key?: string) {
    const client = new Client({ name: 'mcp-test', version: '1.0.0' })
    const headers: Record<string, string> = key ? { authorization: `Bearer ${key}` } : {}
    await client.connect(new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), { requestInit: { headers } }))
    t.teardown(() => client.close())
    // the client then checks each result's structuredContent against the tool's outputSchema
    await client.listTools()
    return client
  }

  const names = async (client: Client) => (await client.listTools()).tools.map((tool) => tool.name).sort()
  const call = async (client: Client, name: string, args: Record<string, unknown> = {}) =>
    (await client.callTool({ name, arguments: args })) as CallToolResult
  const data = (result: CallToolResult) => {
    if (result.isError) throw new Error(`tool error: ${JSON.stringify(result.content)}`)
    return result.structuredContent as any
  }

  t.test('a readonly key lists exactly the read tools, each with the JSON schema of its route', async (t) => {
    const client = await connect(t, reader.key)
    t.same(await names(client), [...readTools].sort())
    const { tools } = await client.listTools()
    const bridge = tools.find((tool) => tool.name === 'get_bridge_quote')!
    t.match(bridge.inputSchema, {
      type: 'object',
      required: ['toChainId', 'fromToken', 'toToken', 'amount', 'userAddress'],
      properties: { slippageBps: { type: 'integer', maximum: 5000 } },
    })
    t.equal(bridge.annotations?.readOnlyHint, true)
    t.match(
      bridge.outputSchema,
      { type: 'object', properties: { id: { type: 'string' }, toAmountMin: { pattern: String } } },
      "the route's success answer",
    )
  })

  t.test('no key: only the paid agent tools, described as paid with x402', async (t) => {
    const client = await connect(t)
    const { tools } = await client.listTools()
    t.same(tools.map((tool) => tool.name).sort(), [...paidTools].sort())
    for (const tool of tools) t.match(tool.description, /Paid per call with x402: \$0\.01 in USDC/)
  })

  t.test('an invalid key: the connection is refused with 401', async (t) => {
    const refused = await connect(t, 'atsk_00000000000000000000000000000000').catch((error: Error) => error)
    t.match(refused, { code: 401, message: /invalid or revoked API key/ })
    const raw = await request('/mcp', {
      method: 'POST',
      key: 'atsk_00000000000000000000000000000000',
      body: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    })
    t.equal(raw.status, 401)
    t.equal(raw.body.error, 'invalid or revoked API key')
    const malformed = await request('/mcp', {
      method: 'POST',
      headers: { authorization: 'Basic abc' },
      body: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    })
    t.equal(malformed.status, 401)
  })

  t.test("a readonly key calls each read tool and gets the route's JSON as structured content", async (t) => {
    const client = await connect(t, reader.key)
    const holder = devnet.accounts[0]!.address
    const prices = data(await call(client, 'get_prices'))
    t.match(prices.prices.ETH, { price: Number, change24h: Number })
    t.ok(data(await call(client, 'get_trending_pools')).trending.length > 0)
    t.match(data(await call(client, 'get_positions', { address: holder })), { address: holder, aave: Object, gmx: Array })
    // the tool answers what its route answers, item for item (a list that could be empty is compared, not type-checked)
    const route = async (path: string) => (await request(path, { key: reader.key })).body
    t.same(
      data(await call(client, 'get_nfts', { address: holder, includeHidden: true })),
      await route(`/nfts/${holder}?includeHidden=true`),
    )
    const top = data(await call(client, 'get_top_predictions', { limit: 3 }))
    t.equal(top.markets.length, 3)
    t.same(data(await call(client, 'get_prediction', { conditionId: top.markets[0].conditionId })).market, top.markets[0])
    const found = data(await call(client, 'search_predictions', { q: 'bitcoin' }))
    t.ok(found.markets.length > 0, 'the search finds markets about bitcoin')
    t.same(found, await route('/predictions/search?q=bitcoin'))
    t.ok(data(await call(client, 'get_bridge_chains')).chains.length > 1)
    const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
    const bridge = data(
      await call(client, 'get_bridge_quote', { toChainId: 10, fromToken: usdc, toToken: 'USDC', amount: '50000000', userAddress: holder }),
    )
    t.match(bridge, { fromChainId: 42161, toChainId: 10, fromAmount: '50000000' })
    t.same(data(await call(client, 'list_jobs')), await route('/portfolio/jobs'))

    const text = (await call(client, 'get_prices')).content as Array<{ type: string; text: string }>
    t.match(JSON.parse(text[0]!.text), { prices: Object }, 'the same JSON as text content')
  })

  t.test('a readonly key calling a readwrite tool gets a tool error naming the tier; an unknown tool is a protocol error', async (t) => {
    const client = await connect(t, reader.key)
    const refused = await call(client, 'execute_swap', { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' })
    t.equal(refused.isError, true)
    t.match(refused.content, [{ type: 'text', text: 'execute_swap needs an API key of tier readwrite or higher; this key is readonly' }])
    const unknown = await call(client, 'transfer_everything').catch((error: Error) => error)
    t.match(unknown, { code: -32602, message: /unknown tool transfer_everything/ })
    const bad = await call(client, 'get_nfts', { address: 'not-an-address' })
    t.equal(bad.isError, true, "the tool's input schema (its route's) refuses the argument before any request")
    t.match(bad.content, [{ text: /^get_nfts: argument address must match pattern/ }])
    const extra = await call(client, 'get_prices', { symbol: 'ETH' })
    t.match(extra.content, [{ text: 'get_prices: unknown argument symbol: get_prices takes no arguments' }])
  })

  const weth = () => devnet.book.tokens.find((token) => token.symbol === 'WETH')!.address
  const keyWith = async (body: Record<string, unknown>) => {
    const res = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label: 'mcp writer', ...body } })
    if (res.status !== 201) throw new Error(`could not create a key: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body as { id: string; key: string }
  }

  t.test('a readwrite key: the read and write tools; execute_swap swaps on the devnet under its policy', async (t) => {
    const writer = await keyWith({ policy: { maxUsdPerSwap: 5 } })
    const client = await connect(t, writer.key)
    t.same(await names(client), [...readTools, ...writeTools].sort())
    const execute = (await client.listTools()).tools.find((tool) => tool.name === 'execute_swap')!
    t.match(execute.inputSchema, {
      required: ['tokenIn', 'tokenOut', 'amountIn'],
      properties: { idempotencyKey: { type: 'string' }, slippageBps: { default: 50 } },
    })
    t.equal(execute.annotations?.readOnlyHint, false)

    const quote = data(await call(client, 'get_swap_quote', { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '2000000' }))
    t.match(quote, { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '2000000', amountOut: /^[0-9]+$/ })
    const prepared = data(
      await call(client, 'prepare_swap', { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '2000000', from: devnet.accounts[3]!.address }),
    )
    t.match(prepared, { tokenIn: 'USDC', tokenOut: 'WETH', transactions: Array })

    const swap = data(
      await call(client, 'execute_swap', { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '2000000', idempotencyKey: 'mcp-swap-1' }),
    )
    t.match(swap, { success: true, hash: /^0x[0-9a-f]{64}$/, tokenIn: 'USDC', tokenOut: 'WETH', idempotencyKey: 'mcp-swap-1' })
    const receipt = await fleet.publicClient.getTransactionReceipt({ hash: swap.hash })
    t.equal(receipt.status, 'success', 'mined on the devnet')
    const again = data(
      await call(client, 'execute_swap', { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '2000000', idempotencyKey: 'mcp-swap-1' }),
    )
    t.equal(again.hash, swap.hash, 'a retry with the same idempotencyKey swaps nothing more')

    const executions = await request('/swap/executions', { key: writer.key })
    t.same(
      executions.body.executions.map((e: { id: string }) => e.id),
      [swap.executionId],
      'the HTTP route shows the execution',
    )
    t.same(
      data(await call(client, 'list_swap_executions', { limit: 5 })).executions.map((e: { id: string }) => e.id),
      [swap.executionId],
    )

    const over = await call(client, 'execute_swap', { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '10000000' })
    t.equal(over.isError, true, 'over the policy cap')
    t.match(over.content, [{ text: /^execute_swap failed \(403\): .*over its limit of \$5\.00 per swap/ }])
    t.equal((await request('/swap/executions', { key: writer.key })).body.executions.length, 1, 'nothing more was executed')
  })

  t.test('automations: create, list, pause, resume', async (t) => {
    const wallet = devnet.accounts[7]!.address
    const writer = await keyWith({ wallet })
    const client = await connect(t, writer.key)
    const created = data(
      await call(client, 'create_automation', {
        walletAddress: wallet,
        type: 'limit-order',
        name: 'WETH when cheap',
        config: { tokenIn: 'USDC', tokenOut: weth(), amount: '1000000', minAmountOut: '1000000000000000000000' },
      }),
    )
    t.match(created.automation, { id: /^aut_/, status: 'active', type: 'limit-order', walletAddress: wallet })
    const { id } = created.automation
    t.same(
      data(await call(client, 'list_automations', { wallet })).automations.map((a: { id: string }) => a.id),
      [id],
    )
    t.match(data(await call(client, 'pause_automation', { id })).automation, { id, status: 'paused', nextRunAt: null })
    t.match(data(await call(client, 'resume_automation', { id })).automation, { id, status: 'active', nextRunAt: Number })
    const missing = await call(client, 'pause_automation', {})
    t.match(missing.content, [{ text: 'pause_automation: missing argument id' }])
    const other = await call(client, 'pause_automation', { id: 'aut_missing' })
    t.match(other.content, [{ text: /^pause_automation failed \(404\)/ }])
  })

  t.test('an order from plain words through agent_prompt, then listed with list_automations', async (t) => {
    const wallet = devnet.accounts[6]!.address
    const writer = await keyWith({ wallet })
    const client = await connect(t, writer.key)
    const answer = data(await call(client, 'agent_prompt', { prompt: 'take profit on 0.01 WETH at 100,000' }))
    t.match(
      JSON.stringify(answer.output),
      /Created a take-profit \(aut_[^)]+\): it sells 0\.01 WETH for USDC when ETH is at or above \$100,000\.00/,
    )
    const [order] = data(await call(client, 'list_automations', { wallet })).automations
    t.match(order, {
      type: 'take-profit',
      status: 'active',
      config: { tokenIn: 'WETH', tokenOut: 'USDC', amount: '10000000000000000', takeProfitPrice: 100000 },
      state: { price: Number },
    })
  })

  t.test('a readwrite key asks the agent through /v1/responses: the answer, then the same answer by its id', async (t) => {
    const writer = await keyWith({})
    const client = await connect(t, writer.key)
    const answer = data(await call(client, 'agent_prompt', { prompt: 'What is the price of ARB?' }))
    t.match(answer, { id: /^resp_/, object: 'response', status: 'completed' })
    t.match(JSON.stringify(answer.output), /ARB: \$[0-9.,]+/, 'the live price of ARB')
    const again = data(await call(client, 'agent_get_job', { id: answer.id }))
    t.match(again, { id: answer.id, status: 'completed' })
    const cancel = await call(client, 'agent_cancel_job', { id: answer.id })
    t.equal(cancel.isError, true, 'a finished answer cannot be cancelled')
    t.match(cancel.content, [{ text: /^agent_cancel_job failed \(400\): / }])
    const jobs = await request('/portfolio/jobs', { key: writer.key })
    t.equal(jobs.body.jobs.length, 1, "the job is the key's")
  })

  t.test('resources and prompts: the token list, and the swap prompt', async (t) => {
    const client = await connect(t)
    const { resources } = await client.listResources()
    t.same(
      resources.map((r) => r.uri),
      ['ats://tokens'],
    )
    const read = await client.readResource({ uri: 'ats://tokens' })
    const { tokens } = JSON.parse((read.contents[0] as { text: string }).text)
    t.same(tokens.map((token: { symbol: string }) => token.symbol).sort(), devnet.book.tokens.map((token) => token.symbol).sort())
    t.match(tokens[0], { symbol: String, name: String, decimals: Number, address: /^0x[0-9a-fA-F]{40}$/ })
    t.match(await client.readResource({ uri: 'ats://nothing' }).catch((error: Error) => error), { code: -32002 })
    const { prompts } = await client.listPrompts()
    t.same(
      prompts.map((p) => p.name),
      ['swap'],
    )
    const prompt = await client.getPrompt({ name: 'swap', arguments: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '25' } })
    t.match(prompt.messages[0], {
      role: 'user',
      content: { type: 'text', text: /^Swap 25 USDC for ARB\.\n.*get_swap_quote.*execute_swap/s },
    })
  })

  t.test('without a key a paid tool asks for its payment (a tool error); GET and DELETE /mcp are 405', async (t) => {
    const client = await connect(t)
    const unpaid = await call(client, 'agent_get_job', { id: 'job_1' })
    t.equal(unpaid.isError, true)
    const keyed = await call(client, 'get_prices')
    t.match(keyed.content, [
      { text: 'get_prices needs an API key of tier readonly or higher: send Authorization: Bearer <key> with the /mcp request' },
    ])
    for (const method of ['GET', 'DELETE']) {
      const res = await request('/mcp', { method, key: reader.key })
      t.equal(res.status, 405, method)
      t.match(res.body.error, /stateless/)
      t.equal(res.headers.get('allow'), 'POST')
    }
  })

  t.test('keyless /mcp messages are rate limited per client address (PAID_RATE_LIMIT_PER_ADDRESS)', async (t) => {
    // listings, and calls of tools a keyless caller does not have (they run no route to count them)
    const messages = [{ method: 'tools/list' }, { method: 'tools/call', params: { name: 'get_prices', arguments: {} } }]
    const send = (i: number) =>
      request('/mcp', {
        method: 'POST',
        headers: { accept: 'application/json, text/event-stream' },
        body: { jsonrpc: '2.0', id: i, ...messages[i % 2] },
      })
    let last = await send(0)
    for (let i = 1; i <= perAddress && last.status === 200; i++) last = await send(i)
    t.equal(last.status, 429)
    t.match(last.body.error, new RegExp(`^rate limit exceeded: ${perAddress} paid requests per 60 s for this client address`))
    t.ok(Number(last.headers.get('retry-after')) > 0)
    const withKey = await connect(t, reader.key)
    t.ok((await withKey.listTools()).tools.length > 0, 'a key is counted by its own limit')
  })
})
