// Polymarket's Gamma API (https://docs.polymarket.com/developers/gamma-markets-api): markets, with outcomes as JSON strings.
import { bytes32Pattern, type PredictionMarket } from '@ats/contracts'
import type { HttpClient } from '@ats/service-kit'
import { UnexpectedAnswer } from '../errors.ts'
import type { PredictionSource } from './types.ts'

interface GammaMarket {
  conditionId?: unknown
  question?: unknown
  slug?: unknown
  description?: unknown
  outcomes?: unknown
  outcomePrices?: unknown
  volume?: unknown
  volumeNum?: unknown
  liquidity?: unknown
  liquidityNum?: unknown
  endDate?: unknown
  active?: unknown
  closed?: unknown
  events?: Array<{ slug?: unknown }>
}

const conditionIdPattern = new RegExp(bytes32Pattern)

/** Gamma sends `outcomes` and `outcomePrices` as JSON text inside the JSON: '["Yes", "No"]'. */
function jsonList(value: unknown): unknown[] {
  if (Array.isArray(value)) return value
  if (typeof value !== 'string') return []
  try {
    const parsed = JSON.parse(value) as unknown
    return Array.isArray(parsed) ? parsed : []
  } catch {
    return []
  }
}

/** volumeNum is a number, volume the same as a string; either may be missing. */
function amount(...values: unknown[]): number {
  for (const value of values) {
    const number = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : Number.NaN
    if (Number.isFinite(number)) return number
  }
  return 0
}

/** `eventSlug`: the event a search found the market in; a /markets answer names its events itself */
function marketOf(market: GammaMarket, eventSlug: unknown): PredictionMarket | undefined {
  if (typeof market.conditionId !== 'string' || !conditionIdPattern.test(market.conditionId)) return undefined
  const names = jsonList(market.outcomes)
  const prices = jsonList(market.outcomePrices)
  const slug = typeof market.slug === 'string' ? market.slug : ''
  const page = eventSlug ?? market.events?.[0]?.slug
  const endDate =
    typeof market.endDate === 'string' && !Number.isNaN(Date.parse(market.endDate)) ? new Date(market.endDate).toISOString() : null
  return {
    conditionId: market.conditionId.toLowerCase(),
    question: typeof market.question === 'string' ? market.question : '',
    slug,
    description: typeof market.description === 'string' ? market.description : '',
    outcomes: names.map((name, i) => ({ name: String(name), price: Math.min(1, Math.max(0, amount(prices[i]))) })),
    volume: amount(market.volumeNum, market.volume),
    liquidity: amount(market.liquidityNum, market.liquidity),
    endDate,
    active: market.active === true,
    closed: market.closed === true,
    url: `https://polymarket.com/event/${typeof page === 'string' && page ? page : slug}`,
  }
}

function marketsOf(answer: unknown, what: string, eventSlug?: unknown): PredictionMarket[] {
  if (!Array.isArray(answer)) throw new UnexpectedAnswer('polymarket', `${what} is not an array of markets`)
  // a market without a valid condition id (a draft, a malformed entry) is skipped, not fatal
  return (answer as Array<GammaMarket | null>).flatMap((market) => (market && marketOf(market, eventSlug)) || [])
}

export function polymarketPredictions(http: HttpClient): PredictionSource {
  return {
    name: 'polymarket',
    async top(limit) {
      const answer = await http.getJson<unknown>('/markets', {
        query: { active: true, closed: false, order: 'volumeNum', ascending: false, limit },
      })
      return marketsOf(answer, '/markets').slice(0, limit)
    },
    async search(q, limit) {
      const answer = await http.getJson<{ events?: unknown }>('/public-search', { query: { q, limit_per_type: limit } })
      if (typeof answer !== 'object' || answer === null) throw new UnexpectedAnswer('polymarket', '/public-search is not an object')
      // no events at all is how Gamma answers a search that found nothing
      const events = answer.events ?? []
      if (!Array.isArray(events)) throw new UnexpectedAnswer('polymarket', '/public-search events is not an array')
      const seen = new Set<string>()
      const found: PredictionMarket[] = []
      for (const event of events as Array<{ slug?: unknown; markets?: unknown } | null>) {
        // the same market can belong to several events; the first, best-ranked, one wins
        for (const market of event?.markets == null ? [] : marketsOf(event.markets, 'an event', event.slug)) {
          if (!seen.has(market.conditionId) && found.length < limit) {
            seen.add(market.conditionId)
            found.push(market)
          }
        }
      }
      return found
    },
    async market(conditionId) {
      const id = conditionId.toLowerCase()
      const answer = await http.getJson<unknown>('/markets', { query: { condition_ids: id } })
      return marketsOf(answer, '/markets').find((market) => market.conditionId === id)
    },
  }
}
