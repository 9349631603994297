// x402 over MCP (x402 spec transports-v2/mcp.md): a paid tool's payment rides in the call's
// `_meta["x402/payment"]` (a PaymentPayload object); without one, the tool answers the 402's
// PaymentRequired as a tool error (`isError`, `structuredContent`, and the `x402/error` wrapper
// in content[0].text); a paid result carries `_meta["x402/payment-response"]`. The payment goes
// to the paid route as the PAYMENT-SIGNATURE header, so it is verified, reserved, charged and
// settled by the same code as an HTTP request's.
import { identityHeaders, type Job as JobView } from '@ats/contracts'
import { injectHttp, tracingEnabled, type Logger } from '@ats/service-kit'
import { declareDiscoveryExtension } from '@x402/extensions/bazaar'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { McpPaymentError } from '../errors.ts'
import { routePattern } from '../payments/discovery.ts'
import { repeatedAnswerHeader } from '../payments/repeatAnswers.ts'
import type { McpTool } from './tools.ts'

/** What an injected request to a gateway route answered. */
export interface RouteAnswer {
  statusCode: number
  headers: Record<string, string | string[] | number | undefined>
  /** the body as text */
  body: string
}

/** A paid tool, as the 402 and bazaar discovery describe it. */
type PaidTool = Pick<McpTool, 'name' | 'description' | 'inputSchema'>

export const paymentMetaKey = 'x402/payment'
export const paymentResponseMetaKey = 'x402/payment-response'

/** The resource a paid tool is sold as (the transport spec's `mcp://tool/<name>`). */
export const toolResource = (name: string) => `mcp://tool/${name}`

/**
 * The resources a paid route is also sold as: `mcp://tool/<name>` of each paid tool that calls
 * it. A payment a client made for a tool's 402 names the tool, and is good for its route.
 */
export function paidToolResources(tools: readonly McpTool[]): (method: string, path: string) => readonly string[] {
  const table = tools
    .filter((tool) => tool.access.kind === 'paid')
    .map((tool) => ({ method: tool.method, pattern: routePattern(tool.url), resource: toolResource(tool.name) }))
  return (method, path) => table.filter((entry) => entry.method === method && entry.pattern.test(path)).map((entry) => entry.resource)
}

/**
 * The HTTP headers that carry a tool call's payment to the paid route: `payment-signature`
 * (base64 of the PaymentPayload) when `_meta["x402/payment"]` is there, else none.
 */
export function paymentHeaders(meta: Record<string, unknown> | undefined): Record<string, string> {
  const payment = meta?.[paymentMetaKey]
  if (payment === undefined) return {}
  if (typeof payment !== 'object' || payment === null || Array.isArray(payment)) {
    throw new McpPaymentError(`_meta["${paymentMetaKey}"] must be an x402 PaymentPayload object (x402Version 2, accepted, payload)`)
  }
  if ((payment as { x402Version?: unknown }).x402Version !== 2) {
    throw new McpPaymentError(`_meta["${paymentMetaKey}"].x402Version must be 2: x402 over MCP carries v2 payloads`)
  }
  return { 'payment-signature': Buffer.from(JSON.stringify(payment)).toString('base64') }
}

const header = (answer: RouteAnswer, name: string) => {
  const value = answer.headers[name]
  return typeof value === 'string' ? value : undefined
}

/**
 * The route's first answer given again to a repeat of a paid call (the same payment, with its
 * payment id): the tool answers it as it is. A paid prompt's repeat answers the job as it was
 * accepted, not followed again: its later state is sold by agent_get_job.
 */
export const repeatedAnswer = (answer: RouteAnswer) => header(answer, repeatedAnswerHeader) === 'true'

const decoded = (value: string | undefined): Record<string, unknown> | undefined => {
  if (!value) return undefined
  try {
    const json = JSON.parse(Buffer.from(value, 'base64').toString('utf8'))
    return json && typeof json === 'object' && !Array.isArray(json) ? json : undefined
  } catch {
    return undefined
  }
}

/** The bazaar discovery extension of a paid tool: `input.type: "mcp"`. */
export function toolDiscovery(tool: PaidTool) {
  return declareDiscoveryExtension({
    toolName: tool.name,
    description: tool.description,
    transport: 'streamable-http',
    inputSchema: tool.inputSchema,
  })
}

/**
 * A route's 402 as the tool result the x402 MCP transport specifies: PaymentRequired (v2, from
 * the PAYMENT-REQUIRED header) with the tool as its resource and the tool's bazaar discovery,
 * in `structuredContent` and wrapped as `x402/error` in content[0].text. Undefined when
 * `answer` is not a 402. `sentPayment`: the call carried one (refused: its reason is kept).
 */
export function paymentRequiredResult(tool: PaidTool, answer: RouteAnswer, sentPayment: boolean): CallToolResult | undefined {
  if (answer.statusCode !== 402) return undefined
  const required = decoded(header(answer, 'payment-required'))
  if (!required)
    return { isError: true, content: [{ type: 'text', text: 'payment required, but the payment terms could not be read; try again' }] }
  const extensions = { ...(required.extensions as Record<string, unknown> | undefined), ...toolDiscovery(tool) }
  const paymentRequired = {
    ...required,
    // the route's words name its HTTP headers; over MCP the payment goes in _meta (a refused one keeps its reason)
    ...(sentPayment ? {} : { error: `payment required: call again with an x402 PaymentPayload in _meta["${paymentMetaKey}"]` }),
    resource: { url: toolResource(tool.name), description: tool.description, mimeType: 'application/json' },
    extensions,
  }
  const message = typeof paymentRequired.error === 'string' ? paymentRequired.error : 'payment required'
  return {
    isError: true,
    structuredContent: paymentRequired,
    content: [{ type: 'text', text: JSON.stringify({ 'x402/error': { code: 402, message, data: paymentRequired } }) }],
  }
}

/** The `_meta` of a paid tool's result: `x402/payment-response` from the route's PAYMENT-RESPONSE header. */
export function paymentResponseMeta(answer: RouteAnswer): Record<string, unknown> | undefined {
  const response = decoded(header(answer, 'payment-response'))
  return response ? { [paymentResponseMetaKey]: response } : undefined
}

export interface PaidJobFollowerOptions {
  agentUrl: string
  internalToken: string
  /** how long a paid prompt's tool call waits for the job's answer */
  waitMs: number
  log: Logger
}

/** where a paid prompt's tool call stops waiting: the job ended, or a swap of it waits for a person's approval */
const answered = new Set(['complete', 'failed', 'cancelled', 'awaiting_approval'])

/**
 * A paid prompt buys its job; the tool call waits for the job's answer, as an MCP client
 * expects, by reading the job from the agent as its payer (through the paid route every look
 * would be charged). A job whose swap waits for a person's approval is answered at once (its
 * `approval` and `notice` say what waits and where to decide it); past `waitMs`, the job as it
 * stands (pending or running): the client follows it with the paid get-job tool.
 */
export function createPaidJobFollower({ agentUrl, internalToken, waitMs, log }: PaidJobFollowerOptions) {
  const base = agentUrl.replace(/\/+$/, '')
  async function read(jobId: string, payer: string, requestId: string): Promise<JobView | undefined> {
    const headers: Record<string, string> = {
      [identityHeaders.internalToken]: internalToken,
      [identityHeaders.ownerId]: payer,
      [identityHeaders.requestId]: requestId,
    }
    // the agent's span of each look joins the tool call's trace
    if (tracingEnabled()) injectHttp(headers)
    const response = await fetch(`${base}/agent/job/${encodeURIComponent(jobId)}`, {
      headers,
      signal: AbortSignal.timeout(10_000),
    })
    if (!response.ok) {
      log.warn({ jobId, status: response.status }, 'paid job could not be read')
      return undefined
    }
    return (await response.json()) as JobView
  }

  return async function follow(jobId: string, payer: string, requestId: string, signal?: AbortSignal): Promise<JobView | undefined> {
    const deadline = Date.now() + waitMs
    let pause = 100
    let last: JobView | undefined
    while (!signal?.aborted) {
      try {
        last = (await read(jobId, payer, requestId)) ?? last
      } catch (error) {
        log.warn({ err: error, jobId }, 'paid job could not be read')
      }
      if ((last && answered.has(last.status)) || Date.now() + pause > deadline) return last
      await new Promise((resolve) => setTimeout(resolve, pause))
      pause = Math.min(pause * 2, 1_000)
    }
    return last
  }
}
export type PaidJobFollower = ReturnType<typeof createPaidJobFollower>
