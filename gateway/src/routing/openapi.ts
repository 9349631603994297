import { publicRoutes, type ApiRoute } from '@ats/contracts'
import type { TSchema } from 'typebox'
import { groupFor, routeTable, type RouteAuth } from './routeTable.ts'

type JsonSchema = Record<string, unknown>

/** TypeBox schemas are JSON Schema; strip the symbol-keyed metadata by a JSON round trip. */
export const plain = (schema: TSchema): JsonSchema => JSON.parse(JSON.stringify(schema)) as JsonSchema

function parameters(schema: TSchema | undefined, where: 'path' | 'query' | 'header') {
  if (!schema) return []
  const { properties = {}, required = [] } = plain(schema) as { properties?: Record<string, JsonSchema>; required?: string[] }
  return Object.entries(properties).map(([name, property]) => ({
    name,
    in: where,
    required: where === 'path' || required.includes(name),
    schema: property,
  }))
}

/** The route group a path belongs to (its prefix), the reference page's sections; gateway routes otherwise. */
const tagOf = (url: string) => groupFor(url)?.prefix ?? 'gateway'

function security(auth: RouteAuth | undefined) {
  if (!auth || auth.kind === 'none') return []
  if (auth.kind === 'payment') return [{ x402: [] }]
  if (auth.kind === 'credit') return [{ apiKey: [] }]
  return [{ apiKey: [auth.tier] }, ...(auth.keyHeaders?.includes('x-api-key') ? [{ xApiKey: [auth.tier] }] : [])]
}

function describeAuth(auth: RouteAuth | undefined): string {
  if (!auth || auth.kind === 'none') return 'No authentication.'
  if (auth.kind === 'payment')
    return 'Paid per request with x402 (X-PAYMENT or PAYMENT-SIGNATURE). A v2 payment may carry a payment id (extension payment-identifier): the same request sent again with it and the same payment gets the first answer again, not charged; another request or another payment with it answers 409. Or paid from prepaid credit (not POST /credit/topup): sign in with the wallet that holds it (SIGN-IN-WITH-X, extension sign-in-with-x of the 402) or send its session token (Authorization: Bearer atcs_…).'
  if (auth.kind === 'credit')
    return "The wallet's own: signed in with it (SIGN-IN-WITH-X) or its session token (Authorization: Bearer atcs_…); or an API key bound to the wallet; or an admin key naming it (?wallet=)."
  const where = auth.keyHeaders?.includes('x-api-key')
    ? " (Authorization: Bearer <key>, or x-api-key: <key> as Anthropic's SDKs send it)"
    : ''
  const credit =
    auth.credit === 'metered' ? " Or paid from a wallet's prepaid credit: its session token (atcs_…) in place of the key; metered." : ''
  return `API key of tier ${auth.tier} or higher${where}.${credit}`
}

/** The OpenAPI 3.1 document of the public API, built from the routes' own schemas. */
export function buildOpenApi(info: { title: string; version: string; description?: string }, routes: readonly ApiRoute[]) {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const r of routes) {
    const path = r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    const auth = groupFor(r.url)?.auth
    const responses = Object.fromEntries(
      Object.entries(r.schema.response).map(([status, schema]) => [
        status,
        {
          description: Number(status) < 400 ? 'success' : 'error',
          content: {
            [Number(status) < 400 && r.produces ? r.produces : 'application/json']: { schema: plain(schema) },
            ...(Number(status) < 300 && r.alsoProduces ? { [r.alsoProduces.mediaType]: { schema: plain(r.alsoProduces.schema) } } : {}),
          },
        },
      ]),
    )
    paths[path] = {
      ...paths[path],
      [r.method.toLowerCase()]: {
        tags: [tagOf(r.url)],
        summary: r.summary,
        description: describeAuth(auth),
        security: security(auth),
        parameters: [
          ...parameters(r.schema.params, 'path'),
          ...parameters(r.schema.querystring, 'query'),
          ...parameters(r.schema.headers, 'header'),
        ],
        ...(r.schema.body && {
          requestBody: { required: true, content: { 'application/json': { schema: plain(r.schema.body) } } },
        }),
        responses,
      },
    }
  }
  const used = new Set(routes.map((r) => tagOf(r.url)))
  const tags = [
    { name: 'gateway', description: 'The service itself: liveness, this document and its reference page.' },
    ...routeTable.map((g) => ({ name: g.prefix, description: `${describeAuth(g.auth)} Served by the ${g.service} service.` })),
  ].filter((tag) => used.has(tag.name))
  return {
    openapi: '3.1.0',
    info,
    tags,
    components: {
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <API key>' },
        xApiKey: { type: 'apiKey', in: 'header', name: 'x-api-key', description: 'x-api-key: <API key>, on POST /v1/messages only' },
        x402: { type: 'apiKey', in: 'header', name: 'X-PAYMENT', description: 'x402 payment (v1 X-PAYMENT or v2 PAYMENT-SIGNATURE)' },
      },
    },
    paths,
  }
}

/**
 * The public API's document as the gateway serves it at /openapi.json, and as `pnpm docs:generate`
 * writes it to docs/openapi.json: the contract users read, built from the routes' own schemas.
 */
export const openApiDocument = (version: string) =>
  buildOpenApi(
    {
      title: 'Agent Trading Service API',
      version,
      description: 'AI-agent DeFi on Arbitrum: agent jobs, swaps, portfolio, market data, automations, administration.',
    },
    publicRoutes,
  )
