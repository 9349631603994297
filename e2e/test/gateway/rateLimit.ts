// Rate limits per key tier through the gateway, counted in Redis and shared by every gateway.
import t from 'tap'
import { startFleet } from '../fleet.ts'

const limits = { RATE_LIMIT_READONLY: '5', RATE_LIMIT_READWRITE: '8', RATE_LIMIT_WINDOW_MS: '60000' }
t.test('rate limits per key tier, shared by the gateways', async (t) => {
  // one fleet (two gateways on one Redis) for the tests with these limits: each counts fresh keys of its own
  const shared = await startFleet(t, { gateways: 2, gatewayEnv: limits })

  t.test('a key over its limit gets 429 {error} with retry-after', async (t) => {
    const { request, createKey } = shared
    const { key } = await createKey('readonly')
    for (let i = 1; i <= 5; i++) {
      const res = await request('/market/prices', { key })
      t.equal(res.status, 200, `request ${i} passes`)
      t.equal(res.headers.get('x-ratelimit-limit'), '5')
      t.equal(res.headers.get('x-ratelimit-remaining'), String(5 - i))
    }
    const over = await request('/market/prices', { key })
    t.equal(over.status, 429)
    t.match(over.body, { error: /^rate limit exceeded: 5 requests per 60 s for this key; retry in (60|59) s$/ })
    const retryAfter = Number(over.headers.get('retry-after'))
    t.ok(retryAfter > 0 && retryAfter <= 60, `retry-after ${retryAfter} s`)
    t.equal(over.headers.get('x-ratelimit-remaining'), '0')
  })

  t.test('limits follow the tier and are counted per key', async (t) => {
    const { request, createKey } = shared
    const readwrite = (await createKey('readwrite')).key
    const other = (await createKey('readonly')).key
    const statuses = []
    for (let i = 0; i < 9; i++) statuses.push((await request('/swap/quote', { key: readwrite })).status)
    t.same(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 429], 'readwrite gets 8')
    t.equal((await request('/market/prices', { key: other })).status, 200, 'another key has its own count')
  })

  t.test('routes without a key are not rate limited by key', async (t) => {
    const { request } = await startFleet(t, { gatewayEnv: { ...limits, RATE_LIMIT_READONLY: '1' } })
    for (let i = 0; i < 3; i++) t.equal((await request('/health')).status, 200)
    t.equal((await request('/')).headers.get('x-ratelimit-limit'), null)
  })

  t.test('two gateways on one Redis share the count', async (t) => {
    const { request, createKey } = shared
    const { key } = await createKey('readonly')
    const statuses = []
    for (let i = 0; i < 6; i++) statuses.push((await request('/market/prices', { key, via: i % 2 })).status)
    t.same(statuses, [200, 200, 200, 200, 200, 429], 'the sixth request, on either gateway, is over the limit of 5')
  })

  t.test('without Redis each gateway counts alone', async (t) => {
    const { request, createKey } = await startFleet(t, { gateways: 2, gatewayEnv: { ...limits, REDIS_URL: '' } })
    const { key } = await createKey('readonly')
    const statuses = []
    for (let i = 0; i < 6; i++) statuses.push((await request('/market/prices', { key, via: i % 2 })).status)
    t.same(statuses, [200, 200, 200, 200, 200, 200], 'three each, under 5 on each process')
  })
})
