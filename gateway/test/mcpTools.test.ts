import { readFile } from 'node:fs/promises'
import t from 'tap'
import { mcpTools, requestOf, type McpTool } from '../src/mcp/tools.ts'

const tools = mcpTools({ price: 10_000 })
const byName = (name: string, kind: 'key' | 'paid' = 'key') => tools.find((tool) => tool.name === name && tool.access.kind === kind) as McpTool

t.test('each tool has the access of its route group: read tools readonly, spending and /v1 readwrite, /agent paid', async (t) => {
  t.same(byName('get_prices').access, { kind: 'key', tier: 'readonly' })
  t.same(byName('get_swap_quote').access, { kind: 'key', tier: 'readwrite' }, '/swap/quote is in the readwrite /swap group')
  t.same(byName('execute_swap').access, { kind: 'key', tier: 'readwrite' })
  t.same(byName('agent_prompt').access, { kind: 'key', tier: 'readwrite' })
  t.same(byName('agent_prompt', 'paid').access, { kind: 'paid' })
  t.match(byName('agent_prompt', 'paid').description, /Paid per call with x402: \$0\.01 in USDC/)
  const names = tools.map((tool) => `${tool.name}:${tool.access.kind}`)
  t.equal(new Set(names).size, names.length, 'one tool of a name per kind of caller')
})

t.test('arguments go where the route reads them: path, query, body, Idempotency-Key', async (t) => {
  t.same(requestOf(byName('get_nfts'), { address: '0xabc', includeHidden: true, pageKey: 'p 2' }), { url: '/nfts/0xabc?includeHidden=true&pageKey=p+2' })
  t.same(requestOf(byName('get_prediction'), { conditionId: '../admin' }), { url: '/predictions/..%2Fadmin' }, 'a path argument cannot leave its segment')
  t.same(requestOf(byName('execute_swap'), { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1', idempotencyKey: 'k1' }), {
    url: '/swap/execute',
    body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1' },
    idempotencyKey: 'k1',
  })
  t.same(requestOf(byName('pause_automation'), { id: 'aut_1' }), { url: '/automations/aut_1', body: { status: 'paused' } })
  t.same(requestOf(byName('agent_prompt'), { prompt: 'hi', previousResponseId: 'resp_1' }), {
    url: '/v1/responses',
    body: { model: 'ats-agent', input: 'hi', previous_response_id: 'resp_1' },
  })
  t.same(requestOf(byName('agent_cancel_job', 'paid'), { id: 'job_1' }), { url: '/agent/job/job_1' })
})

t.test('arguments that fit no part of the route, or a missing path argument, are named', async (t) => {
  t.same(requestOf(byName('get_prices'), { symbol: 'ETH' }), { problem: 'unknown argument symbol: get_prices takes no arguments' })
  t.same(requestOf(byName('get_prediction'), {}), { problem: 'missing argument conditionId' })
  t.same(requestOf(byName('agent_cancel_job'), { id: '..' }), { problem: 'argument id cannot be . or ..' })
  t.same(requestOf(byName('get_swap_quote'), { idempotencyKey: 'x' }), { problem: 'unknown argument idempotencyKey: get_swap_quote takes tokenIn, tokenOut, amountIn, dex' })
})

t.test('input schemas: the route\'s properties, required unless the route gives a default', async (t) => {
  t.match(byName('get_bridge_quote').inputSchema, { type: 'object', required: ['toChainId', 'fromToken', 'toToken', 'amount', 'userAddress'], additionalProperties: false })
  t.same(byName('get_prices').inputSchema, { type: 'object', properties: {}, additionalProperties: false })
})

t.test("output schemas: the route's success answer for keyed tools; none for paid ones, whose result the x402 helpers shape", async (t) => {
  t.match(byName('execute_swap').outputSchema, {
    type: 'object',
    anyOf: [{ type: 'object', properties: { hash: { pattern: String }, executionId: { type: 'string' } } }, { type: 'object', properties: { status: { const: 'awaiting_approval' } } }],
  }, 'the swap, or (202) the approval it waits for')
  t.match(byName('approve_swap').outputSchema, { type: 'object', properties: { id: { type: 'string' }, status: { enum: ['pending', 'approved', 'rejected', 'expired'] } } })
  t.match(byName('create_automation').outputSchema, { type: 'object', properties: { automation: { type: 'object' } } }, 'a 201 answer')
  t.equal(byName('agent_prompt', 'paid').outputSchema, undefined)
})

t.test('docs/mcp.md lists every tool with who may call it and its route', async (t) => {
  const doc = await readFile(new URL('../../docs/mcp.md', import.meta.url), 'utf8')
  const rows = doc.split('\n').filter((line) => /^\| `[a-z_]+` \|/.test(line))
  t.equal(rows.length, tools.length, 'one row per tool')
  for (const tool of tools) {
    const who = tool.access.kind === 'paid' ? 'paid' : tool.access.tier
    const row = `| \`${tool.name}\` | ${who} | \`${tool.method} ${tool.url}\` |`
    t.ok(rows.some((line) => line.startsWith(row)), row)
  }
})
