// The MCP tool table: each tool is one route of the public API, called as that route with the
// caller's key (or payment); its input schema is the route's own (params, query and body merged).
import {
  agentRoutes,
  approvalRoutes,
  automationRoutes,
  marketRoutes,
  maxPromptLength,
  responsesRoutes,
  tradingRoutes,
  FreeText,
  type ApiRoute,
  type HttpMethod,
  type Tier,
} from '@ats/contracts'
import { Type, type TSchema } from 'typebox'
import { plain } from '../routing/openapi.ts'
import { groupFor } from '../routing/routeTable.ts'
import { argumentsProblem, propertyNames } from './arguments.ts'

export type JsonSchema = Record<string, unknown>

/** Who may call a tool: a key of at least `tier`, or anyone paying per call (x402), as its route's group says. */
export type ToolAccess = { kind: 'key'; tier: Tier } | { kind: 'paid' }

export interface McpTool {
  name: string
  description: string
  access: ToolAccess
  method: HttpMethod
  /** the route's url template: `:name` segments are filled from the arguments of the same name */
  url: string
  /** the route's request parts, so each argument goes where the route reads it */
  parts: { params?: TSchema; querystring?: TSchema; body?: TSchema }
  /** the body when it is not the body arguments as they are (the /v1 request shapes) */
  bodyOf?: (args: Record<string, unknown>) => Record<string, unknown>
  /** an `idempotencyKey` argument, sent as the Idempotency-Key header */
  idempotencyKey?: true
  /** the route answers 202 with a paid job: the tool waits for the job and answers it */
  answersJob?: true
  /** the route only reads */
  readOnly: boolean
  inputSchema: JsonSchema
  /** the route's success answer (its structuredContent); none for paid tools, whose result the x402 helpers shape */
  outputSchema?: JsonSchema
}

type ToolSpec = Omit<McpTool, 'description' | 'access' | 'inputSchema' | 'outputSchema' | 'readOnly' | 'method' | 'url' | 'parts'> & {
  /** the route's summary by default */
  description?: string
  route: Pick<ApiRoute, 'method' | 'url' | 'summary'> & { schema: McpTool['parts'] & { response?: Record<number, TSchema> } }
}

const idempotencyKeyArgument = {
  type: 'string',
  minLength: 1,
  maxLength: 128,
  description:
    'retries with the same key return the first result and spend nothing more; the result carries the key used (generated when none is sent)',
}

/** One object schema of every argument: path params, query and body, as the route validates them. */
function inputSchemaOf({ params, querystring, body }: McpTool['parts'], idempotencyKey: boolean): JsonSchema {
  const properties: Record<string, unknown> = {}
  const required: string[] = []
  for (const part of [params, querystring, body]) {
    if (!part) continue
    const schema = plain(part) as { properties?: Record<string, { default?: unknown }>; required?: string[] }
    Object.assign(properties, schema.properties)
    // a property with a default is required by the route's schema, yet the route fills it in
    required.push(...(schema.required ?? []).filter((name) => schema.properties?.[name]?.default === undefined))
  }
  if (idempotencyKey) properties.idempotencyKey = idempotencyKeyArgument
  return { type: 'object', properties, ...(required.length ? { required } : {}), additionalProperties: false }
}

/** A tool may be called as its route may: the route group's key tier, or its payment. */
function accessOf(url: string): ToolAccess {
  const auth = groupFor(url)?.auth
  if (auth?.kind === 'key') return { kind: 'key', tier: auth.tier }
  if (auth?.kind === 'payment') return { kind: 'paid' }
  throw new Error(`MCP tool route ${url} is in no keyed or paid route group`)
}

/**
 * The schema of a route's success answer, when it is an object (MCP's outputSchema must be).
 * A route that also answers 202 with another object (a swap held for approval) has either.
 */
function outputSchemaOf(response: Record<number, TSchema> | undefined): JsonSchema | undefined {
  const success = response?.[200] ?? response?.[201]
  const schema = success && plain(success)
  if (schema?.type !== 'object') return undefined
  const accepted = response?.[202] && plain(response[202])
  return accepted?.type === 'object' ? { type: 'object', anyOf: [schema, accepted] } : schema
}

function tool(spec: ToolSpec): McpTool {
  const { route, ...rest } = spec
  const { params, querystring, body, response } = route.schema
  const access = accessOf(route.url)
  const outputSchema = access.kind === 'key' ? outputSchemaOf(response) : undefined
  return {
    ...rest,
    description: spec.description ?? route.summary,
    access,
    ...(outputSchema ? { outputSchema } : {}),
    method: route.method,
    url: route.url,
    parts: { params, querystring, body },
    readOnly: route.method === 'GET',
    inputSchema: inputSchemaOf({ params, querystring, body }, Boolean(spec.idempotencyKey)),
  }
}

const { params: AutomationId } = automationRoutes.get.schema
// the status is the tool's, not an argument
const automationUpdate = { ...automationRoutes.update, schema: { params: AutomationId, response: automationRoutes.update.schema.response } }

const KeyedPrompt = Type.Object({
  prompt: FreeText({ minLength: 1, maxLength: maxPromptLength, description: 'what to do, in plain words' }),
  previousResponseId: Type.Optional(
    Type.String({ minLength: 1, maxLength: 128, description: 'continue the conversation of this earlier answer (its id, resp_…)' }),
  ),
})
/** A key's agent tools call the /v1 Responses routes (the key's own jobs), with the tool's simpler arguments. */
const { createResponse, retrieveResponse, cancelResponse } = responsesRoutes
const responses = {
  create: { ...createResponse, schema: { body: KeyedPrompt, response: createResponse.schema.response } },
  get: { ...retrieveResponse, schema: { params: retrieveResponse.schema.params, response: retrieveResponse.schema.response } },
  cancel: cancelResponse,
}

const usd = (baseUnits: number) => `$${(baseUnits / 1e6).toFixed(baseUnits % 10_000 === 0 ? 2 : 6)}`

/** The tools of the MCP server; `price` is PAYMENT_PRICE (USDC base units), named in the paid tools' descriptions. */
export function mcpTools({ price }: { price: number }): readonly McpTool[] {
  const paidNote = `Paid per call with x402: ${usd(price)} in USDC, sent in the call's _meta["x402/payment"]; without it the tool answers what to pay.`
  return [
    tool({ name: 'get_prices', route: marketRoutes.prices }),
    tool({ name: 'get_trending_pools', route: marketRoutes.trending }),
    tool({ name: 'get_swap_quote', route: tradingRoutes.quote }),
    tool({ name: 'get_positions', route: tradingRoutes.positions }),
    tool({ name: 'get_nfts', route: marketRoutes.nfts }),
    tool({ name: 'get_top_predictions', route: marketRoutes.topPredictions }),
    tool({ name: 'search_predictions', route: marketRoutes.searchPredictions }),
    tool({ name: 'get_prediction', route: marketRoutes.prediction }),
    tool({ name: 'get_bridge_quote', route: marketRoutes.bridgeQuote }),
    tool({ name: 'get_bridge_chains', route: marketRoutes.bridgeChains }),
    tool({ name: 'list_jobs', route: agentRoutes.portfolioJobs }),

    tool({ name: 'prepare_swap', route: tradingRoutes.prepare }),
    tool({ name: 'execute_swap', route: tradingRoutes.execute, idempotencyKey: true }),
    tool({ name: 'list_swap_executions', route: tradingRoutes.executions }),
    tool({ name: 'list_approvals', route: approvalRoutes.approvals }),
    tool({ name: 'get_approval', route: approvalRoutes.approval }),
    tool({
      name: 'approve_swap',
      description:
        'For a person deciding a swap someone else asked for (an admin key, a key the spend policy names in approvers, or a key bound to the paying wallet): approve it, and it runs now, once, with a fresh quote under the same limits; the job or automation run behind it goes on. Not for a swap this key asked for itself: that is refused (403) unless its policy sets selfApprove. 409 when it was rejected or expired',
      route: approvalRoutes.approve,
    }),
    tool({ name: 'reject_swap', route: approvalRoutes.reject }),
    tool({ name: 'create_automation', route: automationRoutes.create }),
    tool({ name: 'list_automations', route: automationRoutes.list }),
    tool({
      name: 'pause_automation',
      description: 'Pause an automation of this key: it does not run until resumed',
      route: automationUpdate,
      bodyOf: () => ({ status: 'paused' }),
    }),
    tool({
      name: 'resume_automation',
      description: 'Resume a paused automation: it runs again at its next scheduled time after now, never at once',
      route: automationUpdate,
      bodyOf: () => ({ status: 'active' }),
    }),
    tool({
      name: 'agent_prompt',
      description:
        "Ask the agent (it quotes, swaps under this key's spend policy, reads markets) and wait for its answer; the answer's id continues the conversation (previousResponseId). A swap over the policy's approvalAboveUsd answers at once, in_progress, saying what waits for a person's decision (an admin key, or a key the policy names in approvers: not this key, unless its policy sets selfApprove); agent_get_job later has the answer",
      route: responses.create,
      bodyOf: (args) => ({
        model: 'ats-agent',
        input: args.prompt,
        ...(args.previousResponseId ? { previous_response_id: args.previousResponseId } : {}),
      }),
    }),
    tool({
      name: 'agent_get_job',
      description: 'An answer of the agent to this key by its id (resp_…) or job id: its status and output',
      route: responses.get,
    }),
    tool({ name: 'agent_cancel_job', description: 'Cancel an agent answer of this key still under way', route: responses.cancel }),

    tool({
      name: 'agent_prompt',
      description: `Ask the agent (it quotes, reads markets and answers in words) and wait for its answer: the job as it ends, as it stands when a swap of it waits for a person's approval (status awaiting_approval, with the approval and a notice saying who decides it, a person other than the payer's agent, and by when), or as it stands if it runs longer than the gateway's CHAT_TIMEOUT_MS (then follow it with agent_get_job). Charged only when the job completes; a job that would end too late for the payment to be settled is stopped and not charged. ${paidNote}`,
      route: agentRoutes.prompt,
      answersJob: true,
    }),
    tool({ name: 'agent_get_job', description: `${agentRoutes.job.summary}. ${paidNote}`, route: agentRoutes.job }),
    tool({ name: 'agent_cancel_job', description: `${agentRoutes.cancelJob.summary}. ${paidNote}`, route: agentRoutes.cancelJob }),
    tool({
      name: 'agent_skills',
      description: `What the agent can do: its skills, each with the route that serves it. ${paidNote}`,
      route: agentRoutes.skills,
    }),
  ]
}

export interface ToolRequest {
  url: string
  body?: Record<string, unknown>
  idempotencyKey?: string
}

/**
 * The request a tool call makes: arguments split into the path, the query and the body as the
 * route reads them; or what is wrong with the arguments when they cannot make one, checked
 * against the tool's input schema first (arguments.ts).
 */
export function requestOf(tool: McpTool, args: Record<string, unknown>): ToolRequest | { problem: string } {
  const problem = argumentsProblem(tool, args)
  if (problem) return { problem }
  const queryNames = propertyNames(tool.parts.querystring)
  const bodyNames = propertyNames(tool.parts.body)

  const path = tool.url.replace(/:([A-Za-z0-9_]+)/g, (_, name: string) => encodeURIComponent(String(args[name])))
  const query = new URLSearchParams()
  for (const name of queryNames) if (args[name] !== undefined) query.set(name, String(args[name]))
  const body = tool.bodyOf
    ? tool.bodyOf(args)
    : tool.parts.body && Object.fromEntries(bodyNames.filter((name) => args[name] !== undefined).map((name) => [name, args[name]]))
  return {
    url: query.size ? `${path}?${query}` : path,
    ...(body ? { body } : {}),
    ...(tool.idempotencyKey && typeof args.idempotencyKey === 'string' ? { idempotencyKey: args.idempotencyKey } : {}),
  }
}
