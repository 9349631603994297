// POST /mcp: the Model Context Protocol server of the gateway (docs/mcp.md). Stateless: each POST
// gets its own MCP server and transport, so any replica answers any request. Each tool call runs
// its route through this gateway (app.inject): the same auth, tiers, limits, payments and proxy.
import { gatewayRoutes, tierAllows, type Tier } from '@ats/contracts'
import type { Token } from '@ats/chain'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema, McpError, ErrorCode, type CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { authHook, type AuthDeps } from '../auth/authHook.ts'
import { MethodNotAllowed } from '../errors.ts'
import {
  paymentHeaders,
  paymentRequiredResult,
  paymentResponseMeta,
  paymentResponseMetaKey,
  repeatedAnswer,
  type PaidJobFollower,
  type RouteAnswer,
} from './paid.ts'
import { registerPrompts, registerResources } from './resources.ts'
import { mcpTools, requestOf, type McpTool } from './tools.ts'

export interface McpOptions {
  name: string
  version: string
  /** PAYMENT_PRICE, named in the paid tools' descriptions */
  price: number
  /** the chain's tokens (the address book), the ats://tokens resource */
  tokens: () => readonly Token[]
  auth: AuthDeps
  /** waits for the job a paid prompt bought (its answer is the tool's result) */
  followJob: PaidJobFollower
}

/** Who calls: a key's tier, or nobody (the paid tools only). */
type Caller = { tier: Tier } | { tier: undefined }

const toolError = (text: string): CallToolResult => ({ isError: true, content: [{ type: 'text', text }] })

/** The `{error}` message of a route's answer (the /v1 group's `{error: {message}}` too), else its text. */
function messageOf(body: string): string {
  try {
    const { error } = JSON.parse(body) as { error?: string | { message?: string } }
    const message = typeof error === 'string' ? error : error?.message
    if (message) return message
  } catch {}
  return body || 'no answer body'
}

/** The result of a route's answer: its JSON on success (with the paid tools' payment response), its error as a tool error otherwise. */
function resultOf(
  tool: McpTool,
  answer: RouteAnswer,
  payment: { sent: boolean; meta: Record<string, unknown> | undefined },
): CallToolResult {
  if (answer.statusCode === 402 && tool.access.kind === 'paid') {
    const asked = paymentRequiredResult(tool, answer, payment.sent)
    if (asked) return asked
  }
  if (answer.statusCode >= 300) return toolError(`${tool.name} failed (${answer.statusCode}): ${messageOf(answer.body)}`)
  const json: unknown = answer.body ? JSON.parse(answer.body) : {}
  const structured =
    json !== null && typeof json === 'object' && !Array.isArray(json) ? (json as Record<string, unknown>) : { result: json }
  return {
    content: [{ type: 'text', text: JSON.stringify(json) }],
    structuredContent: structured,
    ...(payment.meta ? { _meta: payment.meta } : {}),
  }
}

export async function mcpRoutes(app: FastifyInstance, options: McpOptions) {
  const tools = mcpTools({ price: options.price })
  // the key, when one is sent, is resolved as every keyed route resolves it (401 when invalid);
  // the limiter runs in the handler, where the message says whether a route will count it
  const identify = authHook({ kind: 'key', tier: 'readonly' }, { ...options.auth, limit: async () => {} })

  const visible = (caller: Caller) =>
    tools.filter((tool) =>
      caller.tier ? tool.access.kind === 'key' && tierAllows(caller.tier, tool.access.tier) : tool.access.kind === 'paid',
    )

  /** the /mcp requests whose tool call ran its route (the route counted them) */
  const routed = new WeakSet<FastifyRequest>()

  async function callTool(
    request: FastifyRequest,
    caller: Caller,
    name: string,
    args: Record<string, unknown>,
    meta: Record<string, unknown> | undefined,
  ): Promise<CallToolResult> {
    const tool = visible(caller).find((t) => t.name === name)
    if (!tool) {
      const needs = tools.find((t) => t.name === name && t.access.kind === 'key')?.access
      if (needs?.kind !== 'key') throw new McpError(ErrorCode.InvalidParams, `unknown tool ${name}`)
      return toolError(
        caller.tier
          ? `${name} needs an API key of tier ${needs.tier} or higher; this key is ${caller.tier}`
          : `${name} needs an API key of tier ${needs.tier} or higher: send Authorization: Bearer <key> with the /mcp request`,
      )
    }
    const made = requestOf(tool, args)
    if ('problem' in made) return toolError(`${name}: ${made.problem}`)
    let payment: Record<string, string> = {}
    if (tool.access.kind === 'paid') {
      try {
        payment = paymentHeaders(meta)
      } catch (error) {
        return toolError(`${name}: ${(error as Error).message}`)
      }
    }
    routed.add(request)
    const answered = await app.inject({
      method: tool.method,
      url: made.url,
      remoteAddress: request.ip,
      headers: {
        accept: 'application/json',
        ...(request.headers.authorization ? { authorization: request.headers.authorization } : {}),
        ...(request.headers['user-agent'] ? { 'user-agent': request.headers['user-agent'] } : {}),
        ...payment,
        ...(made.body ? { 'content-type': 'application/json' } : {}),
        ...(made.idempotencyKey ? { 'idempotency-key': made.idempotencyKey } : {}),
      },
      ...(made.body ? { payload: JSON.stringify(made.body) } : {}),
    })
    let answer: RouteAnswer = { statusCode: answered.statusCode, headers: answered.headers, body: answered.body }
    const paid = tool.access.kind === 'paid' ? paymentResponseMeta(answer) : undefined
    // a paid prompt bought its job: the tool answers the job as it ends (or as it stands when the wait runs out);
    // a repeat of the call gets the route's first answer as it is
    if (tool.answersJob && answer.statusCode === 202 && !repeatedAnswer(answer)) {
      const payer = (paid?.[paymentResponseMetaKey] as { payer?: unknown } | undefined)?.payer
      const { jobId } = JSON.parse(answer.body) as { jobId: string }
      const job = typeof payer === 'string' ? await options.followJob(jobId, payer, request.id) : undefined
      if (job) answer = { ...answer, statusCode: 200, body: JSON.stringify(job) }
    }
    return resultOf(tool, answer, { sent: Object.keys(payment).length > 0, meta: paid })
  }

  function serverFor(request: FastifyRequest, caller: Caller): Server {
    const server = new Server({ name: options.name, version: options.version }, { capabilities: { tools: {}, resources: {}, prompts: {} } })
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: visible(caller).map((tool) => ({
        name: tool.name,
        description: tool.description,
        inputSchema: tool.inputSchema as { type: 'object' },
        ...(tool.outputSchema ? { outputSchema: tool.outputSchema as { type: 'object' } } : {}),
        annotations: { readOnlyHint: tool.readOnly, openWorldHint: true },
      })),
    }))
    server.setRequestHandler(CallToolRequestSchema, async ({ params }) =>
      callTool(request, caller, params.name, params.arguments ?? {}, params._meta),
    )
    registerResources(server, options.tokens)
    registerPrompts(server)
    return server
  }

  /**
   * Every /mcp request counts once against the counter its routes use: the key's tier limit, or
   * without a key the paid limit of the client address. A call of a tool the caller has is
   * counted by the route it runs; refused before it (its arguments, its `_meta`, a message the
   * MCP SDK refuses), it is counted here once answered, so a flood of refused calls is 429 as a
   * flood of the route is. Any other message is counted before it is handled.
   */
  const count = (request: FastifyRequest, reply: FastifyReply, caller: Caller) =>
    caller.tier ? options.auth.limit(request, reply) : options.auth.paid.address(request, reply)
  const callsTool = (request: FastifyRequest<{ Body: { method: string; params?: { name?: unknown } } }>, caller: Caller) =>
    request.body.method === 'tools/call' && visible(caller).some((tool) => tool.name === request.body.params?.name)

  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  api.route({
    ...gatewayRoutes.mcp,
    onRequest: async function (request, reply) {
      if (request.headers.authorization !== undefined)
        await (identify as (request: FastifyRequest, reply: FastifyReply) => Promise<void>).call(this, request, reply)
    },
    handler: async (request, typedReply) => {
      // the transport's answer is sent as it wrote it (JSON text), not through the route's serializer
      const reply = typedReply as FastifyReply
      const caller: Caller = { tier: request.identity?.tier }
      const mayRunRoute = callsTool(request, caller)
      if (!mayRunRoute) await count(request, reply, caller)
      const server = serverFor(request, caller)
      const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
      await server.connect(transport)
      try {
        const response = await transport.handleRequest(webRequestOf(request), { parsedBody: request.body })
        // a call refused before its route: counted now, and over the limit answered 429 instead
        if (mayRunRoute && !routed.has(request)) await count(request, reply, caller)
        reply.code(response.status).headers(Object.fromEntries(response.headers))
        return reply.send(await response.text())
      } finally {
        await server.close()
      }
    },
  })
  for (const method of ['GET', 'DELETE'] as const) {
    app.route({
      method,
      url: gatewayRoutes.mcp.url,
      handler: async (_request, reply) => {
        reply.header('allow', 'POST')
        throw new MethodNotAllowed(method)
      },
    })
  }
}

/** The request as the transport reads it: the method, the headers (Accept, Content-Type, MCP-Protocol-Version); the body is passed parsed. */
function webRequestOf(request: FastifyRequest): Request {
  const headers = new Headers()
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined || name === 'authorization') continue
    headers.set(name, Array.isArray(value) ? value.join(', ') : value)
  }
  return new Request(`http://gateway${request.url}`, { method: 'POST', headers })
}
