import { Type } from 'typebox'
import { ErrorBody } from '../common/errors.ts'
import { route } from '../common/route.ts'

/** One JSON-RPC 2.0 message of MCP from the client: a request (with id) or a notification. */
export const McpMessage = Type.Object(
  {
    jsonrpc: Type.Literal('2.0'),
    method: Type.String({ minLength: 1, maxLength: 128, description: 'initialize, tools/list, tools/call, resources/read, prompts/get …' }),
    id: Type.Optional(Type.Union([Type.String({ maxLength: 128 }), Type.Integer()])),
    params: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  },
  { additionalProperties: true },
)

export const gatewayRoutes = {
  health: route({
    method: 'GET',
    url: '/health',
    summary: 'Liveness of the gateway',
    schema: { response: { 200: Type.Object({ ok: Type.Boolean(), ts: Type.Integer() }) } },
  }),
  root: route({
    method: 'GET',
    url: '/',
    summary: 'Service name, version, chain and where the API docs are',
    schema: {
      response: {
        200: Type.Object({
          name: Type.String(),
          version: Type.String(),
          chain: Type.String(),
          chainId: Type.Integer(),
          docs: Type.Optional(Type.String({ description: 'the interactive API reference' })),
          openapi: Type.Optional(Type.String({ description: 'the OpenAPI document' })),
        }),
      },
    },
  }),
  openapi: route({
    method: 'GET',
    url: '/openapi.json',
    summary: 'This OpenAPI document',
    schema: { response: { 200: Type.Object({}, { additionalProperties: true }) } },
  }),
  mcp: route({
    method: 'POST',
    url: '/mcp',
    summary:
      "The Model Context Protocol server (Streamable HTTP, stateless, JSON answers; docs/mcp.md): the API's routes as MCP tools, the token list as a resource. With Authorization: Bearer <API key> it lists the tools of the key's tier and each call runs the route as that key; without one only the paid agent tools, paid per call with x402 in the call's _meta. An invalid key is 401. Send Accept: application/json, text/event-stream",
    schema: {
      body: McpMessage,
      response: {
        200: Type.Object({}, { additionalProperties: true, description: 'the JSON-RPC response' }),
        202: Type.Null({ description: 'a notification, accepted' }),
        400: ErrorBody,
        401: ErrorBody,
        406: Type.Object(
          {},
          { additionalProperties: true, description: 'JSON-RPC error: the Accept header lacks application/json or text/event-stream' },
        ),
        429: ErrorBody,
      },
    },
  }),
}
