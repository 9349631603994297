import { anthropicErrorBody, openAiErrorBody, type Failure, type Tier } from '@ats/contracts'

/** The services the gateway forwards to (each has its *_URL setting). */
export type UpstreamName = 'agent' | 'trading' | 'market-data' | 'automation' | 'admin'
/**
 * The headers an API key is read from: Authorization (Bearer) everywhere; x-api-key as well where
 * a group's clients send it there (Anthropic's SDKs on /v1/messages), nowhere else.
 */
export type KeyHeader = 'authorization' | 'x-api-key'
/**
 * none; payment (x402, or prepaid credit: a wallet signed in or its session token); key (an API key
 * of a tier); credit (a wallet's own credit: the wallet signed in or its session, or an API key —
 * bound to the wallet, or admin naming one)
 */
export type RouteAuth =
  | { kind: 'none' }
  | { kind: 'payment' }
  | { kind: 'key'; tier: Tier; keyHeaders?: readonly KeyHeader[]; credit?: 'metered' }
  | { kind: 'credit' }

export interface RouteGroup {
  /** path prefix as the client sends it; the proxy keeps it when forwarding */
  prefix: string
  service: UpstreamName
  auth: RouteAuth
  /** whose id becomes x-ats-owner-id: the payer's address or the key's id */
  owner: 'payer' | 'key'
  /** how the group's failures are written, when not the API's `{error}` (/v1: OpenAI's shape) */
  errors?: (failure: Failure) => unknown
  /** answers that take as long as an agent job: the group waits CHAT_TIMEOUT_MS, not UPSTREAM_TIMEOUT_MS */
  longRunning?: true
  /**
   * answers that send from the server wallet and wait for receipts (an approval's, then the
   * swap's): the group waits SPEND_TIMEOUT_MS, longer than the service, so a client is not told
   * 504 while its swap goes on (and retries it)
   */
  spending?: true
}

const key = (tier: Tier, keyHeaders?: readonly KeyHeader[]) => ({ kind: 'key' as const, tier, ...(keyHeaders ? { keyHeaders } : {}) })
const meteredCredit = (auth: ReturnType<typeof key>): RouteAuth => ({ ...auth, credit: 'metered' })

/**
 * The gateway's route table (docs/architecture.md, "Contracts").
 * Order does not matter: where prefixes overlap (/swap and /swap/execute), groupFor picks the
 * longest that matches, wherever it stands.
 */
export const routeTable: readonly RouteGroup[] = [
  { prefix: '/agent', service: 'agent', auth: { kind: 'payment' }, owner: 'payer' },
  { prefix: '/portfolio/jobs', service: 'agent', auth: key('readonly'), owner: 'key' },
  { prefix: '/portfolio/positions', service: 'trading', auth: key('readonly'), owner: 'key' },
  { prefix: '/market', service: 'market-data', auth: key('readonly'), owner: 'key' },
  { prefix: '/nfts', service: 'market-data', auth: key('readonly'), owner: 'key' },
  { prefix: '/predictions', service: 'market-data', auth: key('readonly'), owner: 'key' },
  { prefix: '/bridge', service: 'market-data', auth: key('readonly'), owner: 'key' },
  { prefix: '/swap', service: 'trading', auth: key('readwrite'), owner: 'key' },
  { prefix: '/swap/execute', service: 'trading', auth: key('readwrite'), owner: 'key', spending: true },
  { prefix: '/launchpad', service: 'trading', auth: key('readwrite'), owner: 'key', spending: true },
  // a /v1 completion may also be paid from a wallet's credit (its session token as the API key): metered
  { prefix: '/v1', service: 'agent', auth: meteredCredit(key('readwrite')), owner: 'key', errors: openAiErrorBody, longRunning: true },
  {
    prefix: '/v1/messages',
    service: 'agent',
    auth: meteredCredit(key('readwrite', ['authorization', 'x-api-key'])),
    owner: 'key',
    errors: anthropicErrorBody,
    longRunning: true,
  },
  { prefix: '/automations', service: 'automation', auth: key('readwrite'), owner: 'key' },
  { prefix: '/grants', service: 'trading', auth: key('readwrite'), owner: 'key' },
  { prefix: '/approvals', service: 'trading', auth: key('readwrite'), owner: 'key', spending: true },
  { prefix: '/webhooks', service: 'admin', auth: key('readwrite'), owner: 'key' },
  { prefix: '/admin', service: 'admin', auth: key('admin'), owner: 'key' },
  { prefix: '/credit', service: 'admin', auth: { kind: 'credit' }, owner: 'payer' },
  { prefix: '/credit/topup', service: 'admin', auth: { kind: 'payment' }, owner: 'payer' },
]

export function groupFor(path: string): RouteGroup | undefined {
  let best: RouteGroup | undefined
  for (const group of routeTable) {
    const hit = path === group.prefix || path.startsWith(`${group.prefix}/`) || path.startsWith(`${group.prefix}?`)
    if (hit && (!best || group.prefix.length > best.prefix.length)) best = group
  }
  return best
}
