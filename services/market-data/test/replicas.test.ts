import { fileURLToPath } from 'node:url'
import { baseTestEnv, startService, startServiceProcess, testInfra } from '@ats/service-kit/testing'
import t from 'tap'
import { marketDataService } from '../src/service.ts'
import { keyHeaders, startTestDevnet } from './helpers.ts'
import { startUpstreams } from './upstreams.ts'

/**
 * Two market-data processes on the public adapters (CoinGecko, GeckoTerminal), played by the local
 * upstream server, which counts its calls: replicas share one cache and one upstream call per ttl.
 */
const server = fileURLToPath(new URL('../src/server.ts', import.meta.url))
const upstreams = await startUpstreams(t)
const chain = await startTestDevnet(t)
const env: NodeJS.ProcessEnv = {
  ...(await baseTestEnv(t)),
  ...chain.chainEnv,
  REDIS_URL: (await testInfra()).redisUrl,
  PRICE_SOURCE: 'coingecko',
  COINGECKO_URL: upstreams.base.coingecko,
  TRENDING_SOURCE: 'geckoterminal',
  GECKOTERMINAL_URL: upstreams.base.geckoterminal,
  SOURCE_TIMEOUT_MS: '3000',
  MARKET_CACHE_TTL_MS: '60000',
}
const replicas = await Promise.all([startServiceProcess(t, server, env), startServiceProcess(t, server, env)])
const get = async (url: string) => {
  const res = await fetch(url, { headers: keyHeaders() })
  return { status: res.status, body: (await res.json()) as any }
}

t.test('100 concurrent requests over two processes on a cold cache make one upstream call', async (t) => {
  for (const [path, upstreamPath] of [
    ['/market/prices', '/simple/price'],
    ['/market/trending', '/trending_pools'],
  ] as const) {
    upstreams.reset()
    // slow enough that every request arrives while the first call is still out
    upstreams.behave(upstreamPath, { delayMs: 250 })
    const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => get(`${replicas[i % 2]!.url}${path}`)))
    t.ok(
      answers.every((answer) => answer.status === 200),
      `${path}: all 200 (${[...new Set(answers.map((a) => `${a.status} ${a.body.error ?? ''}`))].join('; ')})`,
    )
    t.equal(upstreams.calls(upstreamPath), 1, `${path}: one upstream call`)
    t.equal(new Set(answers.map((answer) => answer.body.updatedAt)).size, 1, `${path}: one answer for all`)
    const again = await get(`${replicas[1]!.url}${path}`)
    t.equal(again.body.cached, true)
    t.equal(upstreams.calls(upstreamPath), 1, `${path}: later requests are served from the cache`)
  }
})

t.test('an upstream 500 is a 502 {error}, a hang a 503 {error} within the timeout; neither crashes the service', async (t) => {
  // a replica of its own namespace (so nothing is cached yet), in this process: quicker to start
  const fresh = { ...env, NATS_NAMESPACE: `${env.NATS_NAMESPACE}b`, SOURCE_TIMEOUT_MS: '1000', PORT: '0' }
  const replica = await startService(t, marketDataService, fresh)
  upstreams.behave('/trending_pools', 500)
  const failed = await get(`${replica.url}/market/trending`)
  t.equal(failed.status, 502)
  t.match(failed.body, { error: /geckoterminal/ })
  upstreams.behave('/simple/price', 'hang')
  const started = Date.now()
  const hung = await get(`${replica.url}/market/prices`)
  t.equal(hung.status, 503)
  t.match(hung.body, { error: /coingecko did not answer within/ })
  t.ok(Date.now() - started < 2000, `answered in ${Date.now() - started} ms`)
  upstreams.behave('/trending_pools', 'ok')
  upstreams.behave('/simple/price', 'ok')
  t.equal((await fetch(`${replica.url}/ready`)).status, 200, 'still up')
})
