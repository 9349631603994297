// One local HTTP server playing the five public APIs market-data reads, with their documented
// answers (test/fixtures, recorded shapes) and 4xx shapes; it counts calls and can be made to fail.
import { readFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

/** how a path is answered: as the API would, a 500, a 429, never, late, or with this 200 body */
export type Behaviour = 'ok' | 500 | 429 | 'hang' | { delayMs: number } | { body: unknown }

/** a recorded-shape answer of test/fixtures, read afresh so a test may change its copy */
export const fixture = <T>(name: string): T => JSON.parse(readFileSync(new URL(`./fixtures/${name}.json`, import.meta.url), 'utf8')) as T

type Handler = (query: URLSearchParams, path: string) => [number, unknown]

const send = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers })
  res.end(JSON.stringify(body))
}

/** CoinGecko /simple/price: ids and vs_currencies are required; the change only with include_24hr_change=true. */
const coingecko: Handler = (query) => {
  const ids = query.get('ids')
  if (!ids || !query.get('vs_currencies')) return [400, { error: 'Missing parameter ids or vs_currencies' }]
  const prices = fixture<Record<string, { usd: number; usd_24h_change: number | null }>>('coingecko-simple-price')
  const withChange = query.get('include_24hr_change') === 'true'
  const answer = Object.fromEntries(
    ids.split(',').flatMap((id) => (prices[id] ? [[id, withChange ? prices[id] : { usd: prices[id].usd }]] : [])),
  )
  return [200, answer]
}

/** GeckoTerminal /networks/{network}/trending_pools: a JSON:API document; unknown networks 404. */
const geckoterminal: Handler = (_query, path) => {
  const network = /^\/networks\/([^/]+)\/trending_pools$/.exec(path)?.[1]
  if (network !== 'arbitrum') return [404, { errors: [{ status: '404', title: 'Not Found' }] }]
  return [200, fixture('geckoterminal-trending-pools')]
}

/** Alchemy /nft/v3/{apiKey}/getNFTsForOwner: owner required; two pages of 2 and 1, the second behind pageKey "page-2". */
const alchemy: Handler = (query, path) => {
  if (!/^\/[^/]+\/getNFTsForOwner$/.test(path)) return [404, { error: { message: 'not found' } }]
  const owner = query.get('owner')
  if (!owner || !/^0x[0-9a-fA-F]{40}$/.test(owner)) return [400, { error: { message: 'owner should be a valid address or ENS name' } }]
  const pageKey = query.get('pageKey')
  if (pageKey !== null && pageKey !== 'page-2') return [400, { error: { message: 'invalid pageKey' } }]
  const nfts = fixture<unknown[]>('alchemy-nfts-for-owner')
  const second = pageKey === 'page-2'
  const page = second ? nfts.slice(2) : nfts.slice(0, 2)
  return [
    200,
    {
      ownedNfts: page,
      totalCount: nfts.length,
      pageKey: second ? null : 'page-2',
      validAt: { blockNumber: 276543210, blockHash: null, blockTimestamp: null },
    },
  ]
}

type GammaMarket = {
  conditionId?: string
  question?: string
  slug?: string
  volumeNum?: number
  volume?: string
  active?: boolean
  closed?: boolean
  events?: Array<{ slug?: string; title?: string }>
}

/** Gamma /markets (filters, order, limit, condition_ids) and /public-search (q required). */
const gamma: Handler = (query, path) => {
  const markets = fixture<GammaMarket[]>('gamma-markets')
  if (path === '/markets') {
    const ids = query.getAll('condition_ids')
    let found = ids.length > 0 ? markets.filter((m) => m.conditionId && ids.includes(m.conditionId)) : markets
    if (query.has('active')) found = found.filter((m) => String(m.active === true) === query.get('active'))
    if (query.has('closed')) found = found.filter((m) => String(m.closed === true) === query.get('closed'))
    if (query.get('order') === 'volumeNum') {
      const volume = (m: GammaMarket) => m.volumeNum ?? Number(m.volume ?? 0)
      found = [...found].sort((a, b) => (query.get('ascending') === 'true' ? volume(a) - volume(b) : volume(b) - volume(a)))
    }
    return [200, found.slice(0, Number(query.get('limit') ?? 100))]
  }
  if (path === '/public-search') {
    const q = query.get('q')?.toLowerCase()
    if (!q) return [422, { error: 'q is required' }]
    const matches = markets.filter((m) => m.question?.toLowerCase().includes(q))
    // an event groups its markets; a market without one stands as its own event
    const events = new Map<string, { id: string; slug: string; title: string; markets: GammaMarket[] }>()
    for (const m of matches) {
      const slug = m.events?.[0]?.slug ?? m.slug ?? ''
      const event = events.get(slug) ?? { id: String(events.size + 1), slug, title: m.events?.[0]?.title ?? m.question ?? '', markets: [] }
      event.markets.push({ ...m, events: undefined })
      events.set(slug, event)
    }
    const found = [...events.values()]
    return [
      200,
      {
        events: found.slice(0, Number(query.get('limit_per_type') ?? 5)),
        tags: [],
        profiles: [],
        pagination: { hasMore: false, totalResults: found.length },
      },
    ]
  }
  return [404, { error: 'not found' }]
}

const lifiQuoteParams = ['fromChain', 'toChain', 'fromToken', 'toToken', 'fromAmount', 'fromAddress']

/**
 * LI.FI /v1/quote (its required parameters, slippage a fraction in [0, 1]; amount "1" has no route,
 * toChain 999999 is unsupported) and /v1/chains.
 */
const lifi: Handler = (query, path) => {
  if (path === '/chains') return [200, fixture('lifi-chains')]
  if (path !== '/quote') return [404, { message: 'Not found', code: 1000 }]
  const missing = lifiQuoteParams.filter((name) => !query.get(name))
  if (missing.length > 0) return [400, { message: `${missing[0]} is a required parameter`, code: 1011 }]
  const slippage = Number(query.get('slippage') ?? '0.005')
  if (!(slippage >= 0 && slippage <= 1)) return [400, { message: 'slippage must be less than or equal to 1', code: 1011 }]
  if (query.get('toChain') === '999999') return [400, { message: 'toChain must be equal to one of the allowed values', code: 1011 }]
  if (query.get('fromAmount') === '1') return [404, { message: 'No available quotes for the requested transfer', code: 1002 }]
  return [200, fixture('lifi-quote')]
}

const apis: Record<string, Handler> = {
  '/coingecko/api/v3': coingecko,
  '/geckoterminal/api/v2': geckoterminal,
  '/alchemy/nft/v3': alchemy,
  '/gamma': gamma,
  '/lifi/v1': lifi,
}

export async function startUpstreams(t: Test) {
  const seen: string[] = []
  const behaviours = new Map<string, Behaviour>()
  const hanging = new Set<ServerResponse>()

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://upstream')
    seen.push(url.pathname)
    const behaviour = [...behaviours].find(([fragment]) => url.pathname.includes(fragment))?.[1] ?? 'ok'
    if (behaviour === 'hang') {
      hanging.add(res)
      return
    }
    if (behaviour === 500) return send(res, 500, { error: 'Internal Server Error' })
    // CoinGecko's 429 body; a retry-after past the client's limit, so it gives up at once
    if (behaviour === 429)
      return send(res, 429, { status: { error_code: 429, error_message: "You've exceeded the Rate Limit" } }, { 'retry-after': '60' })
    const [prefix, handler] = Object.entries(apis).find(([prefix]) => url.pathname.startsWith(`${prefix}/`)) ?? []
    const answer = () => {
      if (!handler) return send(res, 404, { error: 'no such API' })
      const [status, body] = handler(url.searchParams, url.pathname.slice(prefix!.length))
      send(res, status, body)
    }
    if (typeof behaviour === 'object' && 'body' in behaviour) send(res, 200, behaviour.body)
    else if (typeof behaviour === 'object') setTimeout(answer, behaviour.delayMs)
    else answer()
  })
  server.keepAliveTimeout = 1000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    for (const res of hanging) res.destroy()
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    url,
    /** each API's base URL, as its *_URL setting takes it */
    base: {
      coingecko: `${url}/coingecko/api/v3`,
      geckoterminal: `${url}/geckoterminal/api/v2`,
      /** Alchemy's base including a test key, as the service builds it */
      alchemy: `${url}/alchemy/nft/v3/test-key`,
      /** as ALCHEMY_NFT_URL takes it: the service appends ALCHEMY_API_KEY itself */
      alchemyWithoutKey: `${url}/alchemy/nft/v3`,
      gamma: `${url}/gamma`,
      lifi: `${url}/lifi/v1`,
    },
    /** requests whose path contains `fragment` (all without one) since the start or the last reset */
    calls: (fragment?: string) => seen.filter((path) => fragment === undefined || path.includes(fragment)).length,
    reset() {
      seen.length = 0
      behaviours.clear()
    },
    /** how requests whose path contains `fragment` are answered from now on */
    behave(fragment: string, behaviour: Behaviour) {
      if (behaviour === 'ok') behaviours.delete(fragment)
      else behaviours.set(fragment, behaviour)
    },
  }
}
