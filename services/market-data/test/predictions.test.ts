import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PredictionMarkets, type PredictionMarket } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import t, { type Test } from 'tap'
import { Compile } from 'typebox/compile'
import { keccak256, toHex } from 'viem'
import { catalogPredictions, loadCatalog } from '../src/local/predictions.ts'
import { migratedDb } from './helpers.ts'

/** A logger that keeps what was logged at info. */
function recordingLog() {
  const infos: unknown[][] = []
  const none = () => {}
  const log = {
    level: 'info',
    info: (...args: unknown[]) => infos.push(args),
    warn: none,
    error: none,
    debug: none,
    trace: none,
    fatal: none,
  } as unknown as Logger
  return { log, infos }
}
const { log } = recordingLog()

const market = (slug: string, fields: Partial<PredictionMarket> = {}): PredictionMarket => ({
  conditionId: keccak256(toHex(slug)),
  question: `Question ${slug}?`,
  slug,
  description: 'A market of the test catalog.',
  outcomes: [
    { name: 'Yes', price: 0.4 },
    { name: 'No', price: 0.6 },
  ],
  volume: 1000,
  liquidity: 100,
  endDate: '2027-06-30T00:00:00.000Z',
  active: true,
  closed: false,
  url: `https://polymarket.com/event/${slug}`,
  ...fields,
})

/** The test's catalog: a question election, a description-only referendum, bitcoin in a question and in a description. */
const catalog = [
  market('election-small', { question: 'Who will win the 2028 presidential election?', volume: 50 }),
  market('election-big', { question: 'Which party wins the general election?', volume: 5000 }),
  market('referendum', {
    question: 'Will Scotland vote to leave?',
    description: 'Resolves Yes if an independence referendum passes.',
    volume: 300,
  }),
  market('bitcoin-question', { question: 'Will Bitcoin reach $200k?', volume: 10 }),
  market('crypto-cap', {
    question: 'Will the crypto market cap double?',
    description: 'Measured by bitcoin, ether and bitcoin dominance.',
    volume: 9000,
  }),
  market('closed-big', { question: 'Fed rate cut in September 2024?', volume: 90_000, active: false, closed: true, endDate: null }),
  market('paused', { question: 'Will the paused market resolve?', volume: 80_000, active: false }),
]

function writeCatalog(t: Test, markets: unknown[]): string {
  const path = join(t.testdir(), 'predictions.json')
  writeFileSync(path, JSON.stringify(markets))
  return path
}

async function loaded(t: Test, markets: unknown[] = catalog) {
  const { db } = await migratedDb(t)
  await loadCatalog(db, log, writeCatalog(t, markets))
  return { db, source: catalogPredictions(db) }
}

const slugs = (markets: PredictionMarket[]) => markets.map((m) => m.slug)
const shape = Compile(PredictionMarkets)

t.test('the bundled catalog loads about 40 markets in the contract shape, and says so in the log', async (t) => {
  const { db } = await migratedDb(t)
  const { log, infos } = recordingLog()
  const count = await loadCatalog(db, log)
  t.ok(count >= 30 && count <= 60, `${count} markets`)
  t.equal(await db.predictionMarket.count(), count)
  t.match(infos, [[{ markets: count }, 'prediction catalog loaded']])
  const source = catalogPredictions(db)
  t.ok(shape.Check({ markets: await source.top(100) }), 'top answers the contract shape')
  t.ok(shape.Check({ markets: await source.search('bitcoin', 100) }), 'search answers the contract shape')
  t.ok((await source.search('election', 10)).length > 0, 'the catalog has elections')
})

t.test('loading the catalog again keeps one row per market and rewrites none', async (t) => {
  const { db } = await loaded(t)
  const before = await db.predictionMarket.findMany({ orderBy: { conditionId: 'asc' } })
  const { log, infos } = recordingLog()
  t.equal(await loadCatalog(db, log, writeCatalog(t, catalog)), catalog.length)
  t.equal(await db.predictionMarket.count(), catalog.length)
  t.match(infos, [[{ markets: catalog.length, written: 0, removed: 0 }]])
  t.same(await db.predictionMarket.findMany({ orderBy: { conditionId: 'asc' } }), before, 'updatedAt unchanged')
})

t.test('replicas loading the catalog at the same time all succeed', async (t) => {
  const { db } = await migratedDb(t)
  const path = writeCatalog(t, catalog)
  t.same(await Promise.all([1, 2, 3].map(() => loadCatalog(db, log, path))), [catalog.length, catalog.length, catalog.length])
  t.equal(await db.predictionMarket.count(), catalog.length)
})

t.test('a changed catalog updates changed markets and removes dropped ones', async (t) => {
  const { db, source } = await loaded(t)
  const changed = [{ ...catalog[0]!, volume: 123_456 }, ...catalog.slice(1, -1)]
  const { log, infos } = recordingLog()
  await loadCatalog(db, log, writeCatalog(t, changed))
  t.match(infos, [[{ markets: catalog.length - 1, written: 1, removed: 1 }]])
  t.equal((await source.market(catalog[0]!.conditionId))?.volume, 123_456)
  t.equal(await source.market(catalog.at(-1)!.conditionId), undefined)
})

t.test('a catalog entry that breaks the contract stops the start, naming the entry and field', async (t) => {
  const { db } = await migratedDb(t)
  const bad = [market('fine'), { ...market('bad'), conditionId: '0x1234' }]
  await t.rejects(loadCatalog(db, log, writeCatalog(t, bad)), { name: 'StartupError', message: /market 1 \/conditionId/ })
  const twice = [market('same'), market('same')]
  await t.rejects(loadCatalog(db, log, writeCatalog(t, twice)), { message: /market 1 repeats conditionId/ })
  t.equal(await db.predictionMarket.count(), 0, 'nothing loaded')
})

/** The searches and lookups only read: one loaded database serves them all. */
const readOnly = await loaded(t)

t.test('top lists open markets only, by volume, highest first, up to the limit', async (t) => {
  const { source } = readOnly
  t.same(slugs(await source.top(10)), ['crypto-cap', 'election-big', 'referendum', 'election-small', 'bitcoin-question'])
  t.same(slugs(await source.top(2)), ['crypto-cap', 'election-big'])
})

t.test('search finds stemmed words: "elections" finds election questions, equal matches by volume', async (t) => {
  const { source } = readOnly
  t.same(slugs(await source.search('elections', 10)), ['election-big', 'election-small'])
  t.same(slugs(await source.search('Elections!', 1)), ['election-big'], 'limit and punctuation')
})

t.test('search finds a word that is only in a description', async (t) => {
  const { source } = readOnly
  t.same(slugs(await source.search('referendums', 10)), ['referendum'])
})

t.test('search ranks a question match above a description match with more volume', async (t) => {
  const { source } = readOnly
  t.same(slugs(await source.search('bitcoin', 10)), ['bitcoin-question', 'crypto-cap'])
})

t.test('search includes closed markets', async (t) => {
  const { source } = readOnly
  t.same(slugs(await source.search('rate cut', 10)), ['closed-big'])
})

t.test('search with only stop words or punctuation answers no markets', async (t) => {
  const { source } = readOnly
  for (const q of ['the', 'the of and', '!!!', '"" -', '&|!():*']) t.same(await source.search(q, 10), [], JSON.stringify(q))
})

t.test('search uses the GIN index on the search column', async (t) => {
  const { db } = readOnly
  const plan = await db.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SET LOCAL enable_seqscan = off')
    return tx.$queryRaw<{ 'QUERY PLAN': string }[]>`
      EXPLAIN SELECT condition_id FROM prediction_markets, websearch_to_tsquery('english', ${'elections'}) AS query WHERE search @@ query`
  })
  t.match(plan.map((row) => row['QUERY PLAN']).join('\n'), /Bitmap Index Scan on prediction_markets_search_idx/)
})

t.test('a market by its condition id, in any case of hex; an unknown one is undefined', async (t) => {
  const { source } = readOnly
  const wanted = catalog[2]!
  t.same(await source.market(wanted.conditionId.toUpperCase().replace('0X', '0x')), { ...wanted })
  t.equal(await source.market(keccak256(toHex('no such market'))), undefined)
})
