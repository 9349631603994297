import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { createError } from '../src/errors.ts'
import { createSharedCache, type SharedCacheOptions } from '../src/sharedCache.ts'
import { testInfra } from '../src/testing.ts'

const { redisUrl } = await testInfra()
const silent = { warn() {}, info() {}, error() {}, debug() {} } as unknown as SharedCacheOptions['log']
const Down = createError<[string]>('ATS_ERR_TEST_UPSTREAM', '%s failed: 500 Internal Server Error', 502)

/** One "replica": its own Redis connection and its own cache, on the test's prefix. */
function replica(t: Test, prefix: string, options: Partial<SharedCacheOptions> = {}) {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 })
  t.teardown(() => redis.quit())
  return createSharedCache({ redis, prefix, log: silent, ...options })
}

/** A load that counts its calls and takes `ms`, so concurrent misses really overlap. */
function upstream(ms = 100) {
  let calls = 0
  return {
    get calls() {
      return calls
    },
    load: async () => {
      calls++
      await sleep(ms)
      return { price: 3000, call: calls }
    },
  }
}

const prefix = () => `test:${randomBytes(6).toString('hex')}`

t.test('a miss loads, then the value is served from the cache until it expires', async (t) => {
  const cache = replica(t, prefix())
  const source = upstream(1)
  const first = await cache.get('prices', 300, source.load)
  t.match(first, { value: { call: 1 }, cached: false })
  const second = await cache.get('prices', 300, source.load)
  t.match(second, { value: { call: 1 }, cached: true })
  t.equal(second.storedAt, first.storedAt)
  await sleep(350)
  t.match(await cache.get('prices', 300, source.load), { value: { call: 2 }, cached: false }, 'loaded again after the ttl')
  t.equal(source.calls, 2)
})

t.test('100 concurrent misses over two replicas make one load; the other replica reads it from the cache', async (t) => {
  const key = prefix()
  const [a, b] = [replica(t, key), replica(t, key)]
  const source = upstream(150)
  const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 ? a : b).get('prices', 5000, source.load)))
  t.equal(source.calls, 1)
  t.ok(answers.every((answer) => answer.value.call === 1))
  const fresh = answers.filter((answer) => !answer.cached).length
  t.ok(fresh >= 1 && fresh <= 50, `the loading replica's callers share its fresh answer (${fresh}); the other's come from the cache`)
})

t.test("a replica that did not load sees the other's value without loading", async (t) => {
  const key = prefix()
  const [a, b] = [replica(t, key), replica(t, key)]
  const source = upstream(1)
  await a.get('trending', 5000, source.load)
  t.match(await b.get('trending', 5000, source.load), { value: { call: 1 }, cached: true })
  t.equal(source.calls, 1)
})

t.test('an upstream failure is shared briefly: the other replica gets the same error without calling', async (t) => {
  const key = prefix()
  const [a, b] = [replica(t, key, { errorTtlMs: 300 }), replica(t, key, { errorTtlMs: 300 })]
  let calls = 0
  const failing = async () => {
    calls++
    throw new Down('coingecko')
  }
  await t.rejects(a.get('prices', 5000, failing), { statusCode: 502, message: 'coingecko failed: 500 Internal Server Error' })
  await t.rejects(b.get('prices', 5000, failing), {
    statusCode: 502,
    code: 'ATS_ERR_TEST_UPSTREAM',
    message: 'coingecko failed: 500 Internal Server Error',
  })
  t.equal(calls, 1)
  await sleep(350)
  const source = upstream(1)
  t.match(await b.get('prices', 5000, source.load), { cached: false }, 'after the error ttl the upstream is asked again')
})

t.test('a bug in the loader is not shared: it is thrown to its caller only', async (t) => {
  const cache = replica(t, prefix())
  await t.rejects(
    cache.get('x', 1000, async () => Promise.reject(new TypeError('boom'))),
    { message: 'boom' },
  )
  t.match(await cache.get('x', 1000, async () => 1), { value: 1, cached: false })
})

t.test('a replica whose loader died (lock left behind) is taken over after the lock expires', async (t) => {
  const key = prefix()
  const redis = new Redis(redisUrl)
  t.teardown(() => redis.quit())
  await redis.set(`${key}:prices:loading`, 'a-dead-replica', 'PX', 200)
  const cache = replica(t, key, { lockMs: 200 })
  const source = upstream(1)
  t.match(await cache.get('prices', 1000, source.load), { value: { call: 1 }, cached: false })
})

t.test('without Redis the replica still answers, caching on its own', async (t) => {
  const redis = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: 0, lazyConnect: true, retryStrategy: () => null })
  redis.on('error', () => {})
  t.teardown(() => redis.disconnect())
  const cache = createSharedCache({ redis, prefix: prefix(), log: silent })
  const source = upstream(1)
  t.match(await cache.get('prices', 1000, source.load), { value: { call: 1 }, cached: false })
  t.match(await cache.get('prices', 1000, source.load), { value: { call: 1 }, cached: true })
})

t.test('with no Redis configured, concurrent misses in one replica still make one load', async (t) => {
  const cache = createSharedCache({ redis: undefined, prefix: prefix(), log: silent })
  const source = upstream(50)
  const answers = await Promise.all(Array.from({ length: 20 }, () => cache.get('prices', 1000, source.load)))
  t.equal(source.calls, 1)
  t.ok(answers.every((answer) => answer.value.call === 1))
  t.match(await cache.get('prices', 1000, source.load), { cached: true })
})
