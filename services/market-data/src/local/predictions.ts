// The devnet's prediction source: a bundled catalog of markets, loaded into Postgres at start and searched there.
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { PredictionMarket } from '@ats/contracts'
import { StartupError, type Logger } from '@ats/service-kit'
import { Compile } from 'typebox/compile'
import type { PrismaClient, PredictionMarket as MarketRow } from '../generated/prisma/client.ts'
import type { PredictionSource } from '../providers/types.ts'

/**
 * <package>/catalog/predictions.json: illustrative markets for the devnet in the shape of GET /predictions;
 * prices, volumes and liquidity are made up, and each conditionId is keccak256 of the slug, not Polymarket's.
 */
export const bundledCatalog = fileURLToPath(new URL('../../catalog/predictions.json', import.meta.url))

const entry = Compile(PredictionMarket)

async function readCatalog(path: string): Promise<PredictionMarket[]> {
  let parsed: unknown
  try {
    parsed = JSON.parse(await readFile(path, 'utf8'))
  } catch (error) {
    throw new StartupError(`prediction catalog ${path}: ${(error as Error).message}`)
  }
  if (!Array.isArray(parsed)) throw new StartupError(`prediction catalog ${path}: not an array of markets`)
  const seen = new Set<string>()
  return parsed.map((market: unknown, i) => {
    if (!entry.Check(market)) {
      const [first] = entry.Errors(market)
      throw new StartupError(
        `prediction catalog ${path}: market ${i} ${first ? `${first.instancePath || '/'} ${first.message}` : 'is not a prediction market'}`,
      )
    }
    const id = market.conditionId.toLowerCase()
    if (seen.has(id)) throw new StartupError(`prediction catalog ${path}: market ${i} repeats conditionId ${id}`)
    seen.add(id)
    return { ...market, conditionId: id }
  })
}

/**
 * Makes prediction_markets hold exactly the catalog at `path`: one INSERT ... ON CONFLICT DO
 * UPDATE (rows that did not change are not rewritten) and one DELETE of markets no longer in
 * it, in a transaction behind an advisory lock, so replicas starting together load one after
 * the other. Returns how many markets the catalog has.
 */
export async function loadCatalog(db: PrismaClient, log: Logger, path = bundledCatalog): Promise<number> {
  const markets = await readCatalog(path)
  const json = JSON.stringify(markets)
  const [, changed, removed] = await db.$transaction([
    db.$executeRaw`SELECT pg_advisory_xact_lock(hashtext('ats:market-data:prediction-catalog'))`,
    db.$executeRaw`
      INSERT INTO prediction_markets AS p (condition_id, question, slug, description, outcomes, volume, liquidity, end_date, active, closed, url)
      SELECT m."conditionId", m.question, m.slug, m.description, m.outcomes, m.volume, m.liquidity, m."endDate", m.active, m.closed, m.url
      FROM jsonb_to_recordset(${json}::jsonb) AS m("conditionId" text, question text, slug text, description text, outcomes jsonb,
        volume float8, liquidity float8, "endDate" timestamptz, active boolean, closed boolean, url text)
      ORDER BY m."conditionId"
      ON CONFLICT (condition_id) DO UPDATE SET question = EXCLUDED.question, slug = EXCLUDED.slug, description = EXCLUDED.description,
        outcomes = EXCLUDED.outcomes, volume = EXCLUDED.volume, liquidity = EXCLUDED.liquidity, end_date = EXCLUDED.end_date,
        active = EXCLUDED.active, closed = EXCLUDED.closed, url = EXCLUDED.url, updated_at = now()
      WHERE (p.question, p.slug, p.description, p.outcomes, p.volume, p.liquidity, p.end_date, p.active, p.closed, p.url)
        IS DISTINCT FROM (EXCLUDED.question, EXCLUDED.slug, EXCLUDED.description, EXCLUDED.outcomes, EXCLUDED.volume,
          EXCLUDED.liquidity, EXCLUDED.end_date, EXCLUDED.active, EXCLUDED.closed, EXCLUDED.url)`,
    db.$executeRaw`DELETE FROM prediction_markets WHERE condition_id <> ALL(${markets.map((m) => m.conditionId)}::text[])`,
  ])
  log.info({ markets: markets.length, written: changed, removed }, 'prediction catalog loaded')
  return markets.length
}

const toMarket = (row: Omit<MarketRow, 'updatedAt'>): PredictionMarket => ({
  conditionId: row.conditionId,
  question: row.question,
  slug: row.slug,
  description: row.description,
  outcomes: row.outcomes as PredictionMarket['outcomes'],
  volume: row.volume,
  liquidity: row.liquidity,
  endDate: row.endDate?.toISOString() ?? null,
  active: row.active,
  closed: row.closed,
  url: row.url,
})

/**
 * Answers from prediction_markets. search is Postgres full-text search over the generated `search`
 * column (question weighted above description; docs/market-data.md): a q with no searchable word
 * (only stop words or punctuation) is an empty query and matches nothing.
 */
export function catalogPredictions(db: PrismaClient): PredictionSource {
  return {
    name: 'catalog',

    async top(limit) {
      const rows = await db.predictionMarket.findMany({
        where: { active: true, closed: false },
        orderBy: [{ volume: 'desc' }, { conditionId: 'asc' }],
        take: limit,
      })
      return rows.map(toMarket)
    },

    async search(q, limit) {
      const rows = await db.$queryRaw<Omit<MarketRow, 'updatedAt'>[]>`
        SELECT condition_id AS "conditionId", question, slug, description, outcomes, volume, liquidity,
          end_date AS "endDate", active, closed, url
        FROM prediction_markets, websearch_to_tsquery('english', ${q}) AS query
        WHERE search @@ query
        ORDER BY ts_rank(search, query) DESC, volume DESC, condition_id
        LIMIT ${limit}`
      return rows.map(toMarket)
    },

    async market(conditionId) {
      const row = await db.predictionMarket.findUnique({ where: { conditionId: conditionId.toLowerCase() } })
      return row ? toMarket(row) : undefined
    },
  }
}
