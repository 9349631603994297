// What the gateway declares, checked without a server: its route table and OpenAPI document, the
// MCP tools made from its routes (and how a paid MCP prompt follows its job), and the x402 bazaar
// discovery of its paid routes.
import { readFile } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { JobEvent, adminRoutes, agentRoutes, anthropicErrorBody, openAiErrorBody, publicRoutes } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import { validateDiscoveryExtension, type DiscoveryExtension } from '@x402/extensions/bazaar'
import t, { type Test } from 'tap'
import type { TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import { createPaidJobFollower } from '../src/mcp/paid.ts'
import { mcpTools, requestOf, type McpTool } from '../src/mcp/tools.ts'
import { discoveryExamples, discoveryFor } from '../src/payments/discovery.ts'
import { buildOpenApi } from '../src/routing/openapi.ts'
import { groupFor, routeTable } from '../src/routing/routeTable.ts'

// the route table and the OpenAPI document
t.test('the longest route-table prefix wins', async (t) => {
  t.equal(groupFor('/portfolio/jobs')?.service, 'agent')
  t.equal(groupFor('/portfolio/positions')?.service, 'trading')
  t.equal(groupFor('/admin/keys/key_1')?.auth.kind, 'key')
  t.equal(groupFor('/agentx'), undefined)
  t.equal(groupFor('/nowhere'), undefined)
  t.equal(new Set(routeTable.map((g) => g.prefix)).size, routeTable.length, 'no prefix twice')
})

t.test('the OpenAPI document lists every public route with its auth', async (t) => {
  const doc = buildOpenApi({ title: 't', version: '1' }, publicRoutes)
  for (const r of publicRoutes) {
    const path = r.url.replace(/:(\w+)/g, '{$1}')
    t.ok(doc.paths[path]?.[r.method.toLowerCase()], `${r.method} ${r.url} documented`)
  }
  const create = doc.paths['/admin/keys']?.post as {
    security: unknown
    requestBody: { content: Record<string, { schema: { required: string[] } }> }
  }
  t.same(create.security, [{ apiKey: ['admin'] }])
  t.same(create.requestBody.content['application/json']?.schema.required.sort(), ['label', 'tier'])
  const revoke = doc.paths['/admin/keys/{id}']?.delete as { parameters: Array<{ name: string; in: string }> }
  t.same(
    revoke.parameters.map((p) => [p.name, p.in]),
    [['id', 'path']],
  )
  t.same((doc.paths['/health']?.get as { security: unknown } | undefined)?.security, [])
  t.ok(adminRoutes.createKey.schema.response[201])
  const skills = doc.paths['/agent/skills']?.get as { security: unknown; responses: Record<string, unknown> }
  t.same(skills.security, [{ x402: [] }], 'agent routes are paid')
  t.same(Object.keys(skills.responses).sort(), ['200', '402', '503'])
  const chat = doc.paths['/v1/chat/completions']?.post as {
    security: unknown
    responses: Record<string, { content: Record<string, { schema: { $id?: string; properties?: Record<string, unknown> } }> }>
  }
  t.same(chat.security, [{ apiKey: ['readwrite'] }], '/v1 needs a readwrite key')
  t.same(
    Object.keys(chat.responses['200']!.content).sort(),
    ['application/json', 'text/event-stream'],
    'a completion, or its chunks streamed',
  )
  t.equal(chat.responses['400']!.content['application/json']!.schema.$id, 'OpenAiError', "/v1 errors are OpenAI's shape")
  t.ok(doc.paths['/v1/models']?.get, 'the models')
})

t.test("/v1/messages is a group of its own: Anthropic's errors, and its key also read from x-api-key", async (t) => {
  const messages = groupFor('/v1/messages')
  t.equal(messages?.errors, anthropicErrorBody)
  t.same(messages?.auth, { kind: 'key', tier: 'readwrite', keyHeaders: ['authorization', 'x-api-key'], credit: 'metered' })
  t.equal(groupFor('/v1/chat/completions')?.errors, openAiErrorBody, "the rest of /v1 is OpenAI's")
  t.same(groupFor('/v1/chat/completions')?.auth, { kind: 'key', tier: 'readwrite', credit: 'metered' }, 'and reads Authorization only')
  t.equal(groupFor('/v1/messagesx')?.prefix, '/v1')
  const doc = buildOpenApi({ title: 't', version: '1' }, publicRoutes)
  const create = doc.paths['/v1/messages']?.post as {
    security: unknown
    responses: Record<string, { content: Record<string, { schema: { $id?: string } }> }>
  }
  t.same(create.security, [{ apiKey: ['readwrite'] }, { xApiKey: ['readwrite'] }], 'either header')
  t.same(Object.keys(create.responses['200']!.content).sort(), ['application/json', 'text/event-stream'])
  t.equal(create.responses['400']!.content['application/json']!.schema.$id, 'AnthropicError')
})

// MCP tools: one per route, with its access and schemas
const tools = mcpTools({ price: 10_000 })
const byName = (name: string, kind: 'key' | 'paid' = 'key') =>
  tools.find((tool) => tool.name === name && tool.access.kind === kind) as McpTool

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
  const owner = `0x${'ab'.repeat(20)}`
  t.same(requestOf(byName('get_nfts'), { address: owner, includeHidden: true, pageKey: 'p 2' }), {
    url: `/nfts/${owner}?includeHidden=true&pageKey=p+2`,
  })
  t.same(requestOf(byName('get_approval'), { id: 'apr 1%' }), { url: '/approvals/apr%201%25' }, 'a path argument is encoded in its segment')
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

t.test('arguments that fit no part of the route, are missing, break its schema or leave their path segment are named', async (t) => {
  t.same(requestOf(byName('get_prices'), { symbol: 'ETH' }), { problem: 'unknown argument symbol: get_prices takes no arguments' })
  t.same(requestOf(byName('get_prediction'), {}), { problem: 'missing argument conditionId' })
  t.same(requestOf(byName('agent_cancel_job'), { id: '..' }), { problem: 'argument id cannot be . or ..' })
  t.same(requestOf(byName('get_prediction'), { conditionId: ['..'] }), { problem: 'argument conditionId must be string' }, 'no array')
  t.same(requestOf(byName('get_approval'), { id: '%2e%2E' }), { problem: 'argument id cannot be . or ..' }, 'nor once decoded')
  t.same(requestOf(byName('get_approval'), { id: 'a%252Fb' }), {
    problem: 'argument id cannot contain /, \\, ? or # (nor their %-escapes)',
  })
  t.same(requestOf(byName('execute_swap'), { tokenIn: 'USDC' }), { problem: 'missing argument tokenOut, amountIn' })
  t.same(
    requestOf(byName('list_jobs'), { limit: 'all' }),
    { problem: 'argument limit must be integer' },
    'checked against the input schema',
  )
  t.same(requestOf(byName('get_swap_quote'), { idempotencyKey: 'x' }), {
    problem: 'unknown argument idempotencyKey: get_swap_quote takes tokenIn, tokenOut, amountIn, dex',
  })
})

t.test("input schemas: the route's properties, required unless the route gives a default", async (t) => {
  t.match(byName('get_bridge_quote').inputSchema, {
    type: 'object',
    required: ['toChainId', 'fromToken', 'toToken', 'amount', 'userAddress'],
    additionalProperties: false,
  })
  t.same(byName('get_prices').inputSchema, { type: 'object', properties: {}, additionalProperties: false })
})

t.test("output schemas: the route's success answer for keyed tools; none for paid ones, whose result the x402 helpers shape", async (t) => {
  t.match(
    byName('execute_swap').outputSchema,
    {
      type: 'object',
      anyOf: [
        { type: 'object', properties: { hash: { pattern: String }, executionId: { type: 'string' } } },
        { type: 'object', properties: { status: { const: 'awaiting_approval' } } },
      ],
    },
    'the swap, or (202) the approval it waits for',
  )
  t.match(byName('approve_swap').outputSchema, {
    type: 'object',
    properties: { id: { type: 'string' }, status: { enum: ['pending', 'approved', 'rejected', 'expired'] } },
  })
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
    t.ok(
      rows.some((line) => line.startsWith(row)),
      row,
    )
  }
})

// a paid MCP prompt follows its job on the agent (a local server answering as the agent)
/** An agent whose job answers `statuses` in turn (the last one from then on), as its payer reads it. */
async function agentWith(t: Test, statuses: Array<Record<string, unknown>>) {
  let reads = 0
  const server = createServer((_request, response) => {
    const job = statuses[Math.min(reads++, statuses.length - 1)]
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'job_1', createdAt: 1, ...job }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const log = { warn: () => {} } as unknown as Logger

t.test('a paid prompt answers a job that waits for approval at once, with the approval and its notice', async (t) => {
  const approval = { id: 'apr_1', status: 'pending' }
  const agentUrl = await agentWith(t, [
    { status: 'running' },
    { status: 'awaiting_approval', approval, notice: 'Approval needed: swap 50 USDC for WETH' },
  ])
  const follow = createPaidJobFollower({ agentUrl, internalToken: 'token-0123456789abcdef', waitMs: 60_000, log })
  const started = Date.now()
  const job = await follow('job_1', '0xabc', 'req_1')
  t.match(job, { status: 'awaiting_approval', approval, notice: /^Approval needed/ })
  t.ok(Date.now() - started < 5_000, 'not after the wait limit')
})

t.test('a running job is still followed until it ends', async (t) => {
  const agentUrl = await agentWith(t, [{ status: 'running' }, { status: 'running' }, { status: 'complete', result: { text: 'done' } }])
  const follow = createPaidJobFollower({ agentUrl, internalToken: 'token-0123456789abcdef', waitMs: 60_000, log })
  t.match(await follow('job_1', '0xabc', 'req_1'), { status: 'complete' })
})

// x402 bazaar discovery of the paid routes
t.test('every paid route has a bazaar extension that x402 validates, with its method and input schema', async (t) => {
  const requests: Array<[keyof typeof discoveryExamples, string, string]> = [
    ['prompt', 'POST', '/agent/prompt'],
    ['job', 'GET', '/agent/job/job_abc'],
    ['cancelJob', 'DELETE', '/agent/job/job_abc'],
    ['jobEvents', 'GET', '/agent/job/job_abc/events'],
    ['thread', 'GET', '/agent/thread/thr_abc'],
    ['skills', 'GET', '/agent/skills'],
  ]
  for (const [name, method, path] of requests) {
    const extensions = discoveryFor(method, path) as {
      bazaar: DiscoveryExtension & { info: { input: { method: string } }; routeTemplate: string }
    }
    t.ok(extensions, `${method} ${path}`)
    t.same(validateDiscoveryExtension(extensions.bazaar), { valid: true }, `${name} validates`)
    t.equal(extensions.bazaar.info.input.method, method)
    t.equal(extensions.bazaar.routeTemplate, agentRoutes[name].url)
  }
  const prompt = discoveryFor('POST', '/agent/prompt') as any
  t.match(prompt.bazaar.schema.properties.input.properties.body.properties.prompt, { type: 'string', maxLength: 4000, minLength: 1 })
  t.same(prompt.bazaar.info.output.example, discoveryExamples.prompt.output)
  t.match(prompt.bazaar.info.output.example, { jobId: /^job_/, threadId: /^thr_/, status: 'pending' })
  t.equal(discoveryFor('GET', '/agent/nothing'), undefined, 'a path that is no paid route has none')
  t.equal(discoveryFor('PUT', '/agent/prompt'), undefined)
})

t.test("each output example matches its route's response schema (they cannot drift)", async (t) => {
  const { jobEvents, ...plainJson } = discoveryExamples
  t.ok(
    Compile(JobEvent.properties.data).Check((jobEvents.output as { data: unknown }).data),
    'the event example carries event data of the stream',
  )
  for (const [name, example] of Object.entries(plainJson)) {
    const responses: Record<number, TSchema> = agentRoutes[name as keyof typeof discoveryExamples].schema.response
    const schema = responses[example.status]!
    const check = Compile(schema)
    t.ok(
      check.Check(example.output),
      `${name}: ${[...check.Errors(example.output)].map((e) => `${e.instancePath} ${e.message}`).join('; ')}`,
    )
  }
})
