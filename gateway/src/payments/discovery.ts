// x402 v2 bazaar discovery for the paid routes: each 402 of /agent/* says how to call the route
// (its input schema, from the route's contract) and what it answers (an example), so a
// facilitator's catalog can list the service. Built once, with x402's own builder.
import { agentRoutes, type ApiRoute } from '@ats/contracts'
import { declareDiscoveryExtension } from '@x402/extensions/bazaar'
import { plain } from '../routing/openapi.ts'

const jobId = 'job_8pQ2xVb3mWnK0aRt'
const threadId = 'thr_Zk4r7Yq1LsD9eHcw'
const createdAt = 1795400000000

/** the agent's routes under /agent/*, paid per request (GET /portfolio/jobs takes an API key) */
type PaidRoute = Exclude<keyof typeof agentRoutes, 'portfolioJobs'>

/** One answer per paid route, checked against the route's own response schema by the tests. */
export const discoveryExamples: Record<PaidRoute, { status: number; input: Record<string, unknown>; output: unknown }> = {
  prompt: { status: 202, input: { prompt: 'What is the price of ETH?' }, output: { jobId, threadId, status: 'pending' } },
  job: {
    status: 200,
    input: { id: jobId },
    output: {
      id: jobId,
      status: 'complete',
      createdAt,
      threadId,
      prompt: 'What is the price of ETH?',
      updatedAt: createdAt + 40,
      result: { text: 'ETH: $3,012.45 (+1.25% in 24h)', steps: 2, toolCalls: ['get_prices'], transactions: [] },
    },
  },
  cancelJob: { status: 200, input: { id: jobId }, output: { success: true, jobId } },
  // a stream of server-sent events; the example is one event as a client's EventSource sees it
  jobEvents: { status: 200, input: { id: jobId }, output: { id: '1', event: 'status', data: { status: 'pending' } } },
  thread: {
    status: 200,
    input: { id: threadId },
    output: {
      id: threadId,
      createdAt,
      updatedAt: createdAt + 40,
      messages: [
        { id: 'msg_1', role: 'user', content: 'What is the price of ETH?', createdAt, metadata: { jobId } },
        {
          id: 'msg_2',
          role: 'assistant',
          content: 'ETH: $3,012.45 (+1.25% in 24h)',
          createdAt: createdAt + 40,
          toolCalls: ['get_prices'],
          metadata: { jobId },
        },
      ],
    },
  },
  skills: { status: 200, input: {}, output: { skills: [{ name: 'market-prices', url: '/market/prices', external: false }] } },
}

function extensionOf(route: ApiRoute, example: (typeof discoveryExamples)[keyof typeof discoveryExamples]) {
  const output = { example: example.output }
  const hasPath = route.url.includes(':')
  const config = route.schema.body
    ? { bodyType: 'json' as const, input: example.input, inputSchema: plain(route.schema.body), output }
    : {
        ...(hasPath ? { pathParams: example.input, pathParamsSchema: plain(route.schema.params!) } : {}),
        ...(route.schema.querystring ? { inputSchema: plain(route.schema.querystring) } : {}),
        output,
      }
  const extensions = declareDiscoveryExtension(config)
  // the builder leaves the method to x402's server middleware; ours fills it in here
  const info = (extensions.bazaar as { info: { input: Record<string, unknown> } }).info
  info.input = { ...info.input, method: route.method }
  return { ...extensions, bazaar: { ...extensions.bazaar, routeTemplate: route.url } }
}

/** The paths a route's url template (`/agent/job/:id`) matches. */
export const routePattern = (url: string) => new RegExp(`^${url.replace(/:[A-Za-z0-9_]+/g, '[^/]+')}$`)

const table = (Object.keys(discoveryExamples) as PaidRoute[]).map((name) => ({
  method: agentRoutes[name].method,
  pattern: routePattern(agentRoutes[name].url),
  extensions: extensionOf(agentRoutes[name], discoveryExamples[name]),
}))

/** The x402 v2 `extensions` of a 402 for this request, or undefined for a path that is not a paid route. */
export function discoveryFor(method: string, path: string): Record<string, unknown> | undefined {
  return table.find((entry) => entry.method === method && entry.pattern.test(path))?.extensions
}
