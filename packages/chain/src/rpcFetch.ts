// The `fetch` the chain clients' JSON-RPC transport uses: undici's `request` on a keep-alive Agent.
import { Agent, request } from 'undici'

const agent = new Agent({ keepAliveTimeout: 10_000, connections: 16 })

/**
 * Answers with the few members of a Response that viem's HTTP transport reads (ok, status,
 * statusText, headers.get, text; no body stream). Node's global fetch builds a Request, a
 * Response and web streams for every call: in a profile of the gateway's paid route
 * the authorization-state reads spent more CPU in fetch than in everything else they do.
 */
export async function rpcFetch(url: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const response = await request(typeof url === 'string' || url instanceof URL ? url : url.url, {
    dispatcher: agent,
    method: (init.method ?? 'POST') as 'POST',
    headers: init.headers as Record<string, string> | undefined,
    body: init.body as string | undefined,
    signal: init.signal ?? undefined,
  })
  const text = await response.body.text()
  const header = (name: string): string | null => {
    const value = response.headers[name.toLowerCase()]
    return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value
  }
  return {
    ok: response.statusCode >= 200 && response.statusCode < 300,
    status: response.statusCode,
    statusText: '',
    headers: { get: header },
    body: null,
    text: async () => text,
    json: async () => JSON.parse(text) as unknown,
  } as unknown as Response
}
