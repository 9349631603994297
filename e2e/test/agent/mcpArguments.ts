// What an MCP tool call's arguments may be, and what a refused call costs: through the gateway's
// POST /mcp as a client sends it, one JSON-RPC message per request, on fleets over the devnet.
import { startTestDevnet } from '@ats/devnet'
import { mcpTools } from '@ats/gateway/mcp-tools'
import t from 'tap'
import { startPaidFleet } from '../fleet.ts'

t.test('MCP tool arguments checked like the routes they call', async (t) => {
  const chain = await startTestDevnet(t)
  // keyed callers: readwrite keys for the argument checks, readonly keys (a small limit) for the floods
  const readonlyLimit = 6
  const fleet = await startPaidFleet(t, { chain, gatewayEnv: { RATE_LIMIT_READONLY: String(readonlyLimit) } })
  const writer = await fleet.createKey('readwrite', 'mcp arguments')

  /** One tools/call as a JSON-RPC request to POST /mcp: the HTTP status and the JSON-RPC answer. */
  async function callTool(
    request: typeof fleet.request,
    key: string | undefined,
    params: { name: string; arguments?: unknown; _meta?: unknown },
    id = 1,
  ) {
    const res = await request('/mcp', {
      method: 'POST',
      ...(key ? { key } : {}),
      headers: { accept: 'application/json, text/event-stream' },
      body: { jsonrpc: '2.0', id, method: 'tools/call', params },
    })
    return { status: res.status, headers: res.headers, body: res.body }
  }
  const textOf = (answer: { body: any }) => String(answer.body?.result?.content?.[0]?.text ?? JSON.stringify(answer.body))

  t.test('get_prediction with conditionId [".."] is refused naming the argument; the root document is not answered', async (t) => {
    const answer = await callTool(fleet.request, writer.key, { name: 'get_prediction', arguments: { conditionId: ['..'] } })
    t.equal(answer.status, 200)
    t.equal(answer.body.result?.isError, true, 'a tool error')
    t.match(textOf(answer), /^get_prediction: argument conditionId must be string/)
    t.equal(answer.body.result?.structuredContent, undefined, 'no route answered')
    t.notMatch(textOf(answer), /openapi|chainId/, "not the gateway's root document")
  })

  // every tool with a path parameter, from the tool table: a new one is covered as it is added
  const pathTools = mcpTools({ price: 10_000 }).filter((tool) => tool.parts.params)
  const refusedValues: Array<[string, unknown]> = [
    ['..', '..'],
    ['.', '.'],
    ['a slash', 'a/b'],
    ['a backslash', 'a\\b'],
    ['a query', 'a?b'],
    ['a fragment', 'a#b'],
    ['an encoded slash', 'a%2Fb'],
    ['an encoded dot segment', '%2e%2E'],
    ['a slash encoded twice', '..%252fadmin'],
    ['an array', ['..']],
    ['an array of a plain id', ['job_1']],
    ['an object', { id: '..' }],
    ['null', null],
    ['a boolean', true],
  ]

  t.test('every tool with a path parameter refuses dot segments, separators and values that are not scalars', async (t) => {
    t.ok(pathTools.length >= 10, `${pathTools.length} tools with a path parameter`)
    for (const tool of pathTools) {
      const key = tool.access.kind === 'key' ? writer.key : undefined
      const names = Object.keys((tool.parts.params as { properties: object }).properties)
      for (const name of names) {
        for (const [what, value] of refusedValues) {
          const answer = await callTool(fleet.request, key, { name: tool.name, arguments: { [name]: value } })
          t.equal(answer.body.result?.isError, true, `${tool.name} (${tool.access.kind}) ${name}: ${what} is refused`)
          t.match(textOf(answer), new RegExp(`^${tool.name}: argument ${name} `), `${tool.name} ${name}: ${what}: the text names it`)
        }
      }
    }
  })

  t.test('an argument is checked against the tool input schema before any request is made', async (t) => {
    const swap = await callTool(fleet.request, writer.key, {
      name: 'execute_swap',
      arguments: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: { value: '1' } },
    })
    t.match(textOf(swap), /^execute_swap: argument amountIn /, 'a body argument of the wrong type')
    const missing = await callTool(fleet.request, writer.key, { name: 'execute_swap', arguments: { tokenIn: 'USDC' } })
    t.match(textOf(missing), /^execute_swap: missing argument tokenOut, amountIn$/)
    const limit = await callTool(fleet.request, writer.key, { name: 'list_jobs', arguments: { limit: 'all' } })
    t.match(textOf(limit), /^list_jobs: argument limit must be integer/, 'a query argument of the wrong type')
    const id = await callTool(fleet.request, writer.key, { name: 'get_approval', arguments: { id: 'apr_missing' } })
    t.equal(id.body.result?.structuredContent?.path, '/approvals/apr_missing', 'a plain id reaches the route (the echo upstream)')
  })

  /** Refused tool calls of a keyed caller: bad arguments, a malformed _meta, an unknown tool, a tool of another tier. */
  const refusedKeyed = [
    { name: 'get_prediction', arguments: { conditionId: ['..'] } },
    { name: 'get_nfts', arguments: { address: 'a/b' } },
    { name: 'get_prices', arguments: { symbol: 'ETH' } },
    { name: 'get_prices', arguments: {}, _meta: 'not an object' },
    { name: 'get_prices', arguments: ['not', 'an', 'object'] },
    { name: 'execute_swap', arguments: {} },
    { name: 'transfer_everything', arguments: {} },
  ]

  t.test("a flood of refused tool calls by a key counts against the key's limit, as its routes do", async (t) => {
    const reader = await fleet.createKey('readonly', 'mcp flood')
    for (let i = 0; i < readonlyLimit; i++) {
      const answer = await callTool(fleet.request, reader.key, refusedKeyed[i % refusedKeyed.length]!, i)
      t.ok([200, 400].includes(answer.status), `refused call ${i + 1} is answered (a tool or JSON-RPC error): ${answer.status}`)
    }
    const over = await callTool(fleet.request, reader.key, refusedKeyed[0]!)
    t.equal(over.status, 429, 'the call over the limit')
    t.match(over.body, { error: `rate limit exceeded: ${readonlyLimit} requests per 60 s for this key; retry in ` })
    t.ok(Number(over.headers.get('retry-after')) > 0, 'retry-after says when')
    const route = await fleet.request('/market/prices', { key: reader.key })
    t.equal(route.status, 429, 'the HTTP routes of the key are over the same limit')
    const other = await fleet.createKey('readonly', 'mcp bystander')
    t.equal((await fleet.request('/market/prices', { key: other.key })).status, 200, 'another key is not')
  })

  t.test('a flood of refused paid tool calls without a key counts against the paid limit of the client address', async (t) => {
    const perAddress = 8
    const paid = await startPaidFleet(t, { chain, gatewayEnv: { PAID_RATE_LIMIT_PER_ADDRESS: String(perAddress) } })
    const refusedPaid = [
      { name: 'agent_get_job', arguments: { id: ['..'] } },
      { name: 'agent_get_job', arguments: { id: 'job_1' }, _meta: { 'x402/payment': 'not a payload' } },
      { name: 'agent_skills', arguments: {}, _meta: { 'x402/payment': { x402Version: 1 } } },
      { name: 'agent_skills', arguments: {}, _meta: 7 },
      { name: 'agent_cancel_job', arguments: { id: 'a/b' } },
      { name: 'agent_prompt', arguments: { prompt: 5 } },
    ]
    for (let i = 0; i < perAddress; i++) {
      const answer = await callTool(paid.request, undefined, refusedPaid[i % refusedPaid.length]!, i)
      t.ok([200, 400].includes(answer.status), `refused call ${i + 1} is answered (a tool or JSON-RPC error): ${answer.status}`)
    }
    const over = await callTool(paid.request, undefined, refusedPaid[1]!)
    t.equal(over.status, 429, 'the call over the limit')
    t.match(over.body, { error: `rate limit exceeded: ${perAddress} paid requests per 60 s for this client address; retry in ` })
    t.ok(Number(over.headers.get('retry-after')) > 0, 'retry-after says when')
    const route = await paid.request('/agent/skills')
    t.equal(route.status, 429, 'the paid HTTP routes are over the same limit for this address')
    t.match(route.body, { error: /^rate limit exceeded: \d+ paid requests per 60 s for this client address/ })
  })
})
