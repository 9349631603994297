// The idempotency store on a real Postgres: one execution per key, replays, waits, replicas, failures and leases.
import pg from 'pg'
import t, { type Test } from 'tap'
import { BadRequest } from '../src/errors.ts'
import {
  createIdempotencyStore,
  fingerprintOf,
  idempotencyKeyOf,
  type IdempotencyOptions,
  type IdempotencyStore,
} from '../src/idempotency.ts'
import { freshDatabase } from '../src/testing.ts'

const schema = 'trading'
const fp = fingerprintOf({ from: 'USDC', to: 'ETH', amount: '10' })

/** A store on `url`: another store on the same url is another replica (its own pool, no shared memory). */
async function store(t: Test, url: string, options: Partial<IdempotencyOptions> = {}) {
  const s = await createIdempotencyStore(url, { schema, ...options })
  t.teardown(() => s.close())
  return s
}

function deferred<T>() {
  let resolve!: (value: T) => void
  const promise = new Promise<T>((r) => (resolve = r))
  return { promise, resolve }
}

/** A first run of ('swap', 'k1') whose fn is running and answers when `done` is resolved. */
async function runningOn(s: IdempotencyStore) {
  const started = deferred<void>()
  const done = deferred<string>()
  const first = s.run('swap', 'k1', fp, () => {
    started.resolve()
    return done.promise
  })
  await started.promise
  return { first, done }
}

/** The error a call failed with; a call that succeeds fails the test. */
const failure = (call: Promise<unknown>) =>
  call.then(
    (value) => {
      throw new Error(`expected a failure, got ${JSON.stringify(value)}`)
    },
    (error: Error & Record<string, unknown>) => error,
  )

const mismatch = {
  statusCode: 409,
  code: 'ATS_ERR_IDEMPOTENCY_MISMATCH',
  message: 'idempotency key k1 was used with a different request',
}
const inProgress = {
  statusCode: 409,
  code: 'ATS_ERR_IDEMPOTENCY_IN_PROGRESS',
  message: 'a request with this idempotency key is still in progress',
}

const never = () => Promise.reject(new Error('fn must not run'))

async function rows(url: string) {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(`SELECT scope, key, state, status FROM ${schema}.idempotency_keys ORDER BY key`)).rows
  } finally {
    await client.end()
  }
}

t.test('10 concurrent runs with one key execute fn once and all get its result', async (t) => {
  const s = await store(t, await freshDatabase(t))
  let calls = 0
  const fn = async () => {
    await new Promise((resolve) => setImmediate(resolve))
    return { tx: `0x${++calls}` }
  }
  const outcomes = await Promise.all(Array.from({ length: 10 }, () => s.run('swap', 'k1', fp, fn)))
  t.equal(calls, 1)
  t.same(new Set(outcomes.map((o) => JSON.stringify(o.result))), new Set(['{"tx":"0x1"}']))
  t.equal(outcomes.filter((o) => !o.replayed).length, 1, 'one ran, nine replayed')
})

t.test('a repeat after completion replays without calling fn, in this process and another', async (t) => {
  const url = await freshDatabase(t)
  const s = await store(t, url)
  t.same(await s.run('swap', 'k1', fp, async () => ({ tx: '0xabc', at: new Date(0), skipped: undefined })), {
    result: { tx: '0xabc', at: new Date(0), skipped: undefined },
    replayed: false,
  })
  const replay = { result: { tx: '0xabc', at: '1970-01-01T00:00:00.000Z' }, replayed: true }
  t.same(await s.run('swap', 'k1', fp, never), replay)
  t.same(await (await store(t, url)).run('swap', 'k1', fp, never), replay)
  t.same(await rows(url), [{ scope: 'swap', key: 'k1', state: 'done', status: null }])
})

t.test('keys are per scope', async (t) => {
  const s = await store(t, await freshDatabase(t))
  t.same((await s.run('swap', 'k1', fp, async () => 1)).result, 1)
  t.same((await s.run('job-step', 'k1', fp, async () => 2)).result, 2)
})

t.test('a repeat while the first runs waits for it and gets its result', async (t) => {
  const s = await store(t, await freshDatabase(t))
  const done = deferred<{ tx: string }>()
  const first = s.run('swap', 'k1', fp, () => done.promise)
  let settled = false
  const second = s.run('swap', 'k1', fp, never).finally(() => (settled = true))
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(settled, false, 'still waiting')
  done.resolve({ tx: '0x1' })
  t.same(await first, { result: { tx: '0x1' }, replayed: false })
  t.same(await second, { result: { tx: '0x1' }, replayed: true })
})

t.test('a repeat on another replica polls until the first finishes', async (t) => {
  const url = await freshDatabase(t)
  const [a, b] = [await store(t, url), await store(t, url, { pollMs: 20 })]
  const { first, done } = await runningOn(a)
  let settled = false
  const second = b.run('swap', 'k1', fp, never).finally(() => (settled = true))
  t.same(await rows(url), [{ scope: 'swap', key: 'k1', state: 'running', status: null }])
  t.equal(settled, false, 'still waiting')
  done.resolve('0x1')
  t.same(await first, { result: '0x1', replayed: false })
  t.same(await second, { result: '0x1', replayed: true })
})

t.test('two replicas racing on one key execute fn once', async (t) => {
  const url = await freshDatabase(t)
  const replicas = [await store(t, url, { pollMs: 10 }), await store(t, url, { pollMs: 10 })]
  let calls = 0
  const fn = async () => {
    calls++
    await new Promise((resolve) => setTimeout(resolve, 30))
    return { tx: '0x1' }
  }
  const outcomes = await Promise.all(Array.from({ length: 10 }, (_, i) => replicas[i % 2]!.run('swap', 'k1', fp, fn)))
  t.equal(calls, 1)
  t.ok(outcomes.every((o) => o.result.tx === '0x1'))
  t.equal(outcomes.filter((o) => !o.replayed).length, 1)
})

t.test('the same key with another request is refused with 409', async (t) => {
  const url = await freshDatabase(t)
  const s = await store(t, url)
  const other = fingerprintOf({ from: 'USDC', to: 'ETH', amount: '11' })
  const done = deferred<number>()
  const first = s.run('swap', 'k1', fp, () => done.promise)
  const whileRunning = await failure(s.run('swap', 'k1', other, never))
  t.match(whileRunning, mismatch)
  done.resolve(1)
  await first
  for (const replica of [s, await store(t, url)]) {
    const error = await failure(replica.run('swap', 'k1', other, never))
    t.match(error, mismatch)
  }
})

t.test('a 4xx registry error is the stored result and is replayed', async (t) => {
  const url = await freshDatabase(t)
  const s = await store(t, url)
  const first = await failure(s.run('swap', 'k1', fp, () => Promise.reject(new BadRequest('amount below the minimum'))))
  t.ok(first instanceof BadRequest, 'the first caller gets the error itself')
  for (const replica of [s, await store(t, url)]) {
    const replayed = await failure(replica.run('swap', 'k1', fp, never))
    t.match(replayed, { statusCode: 400, code: 'ATS_ERR_BAD_REQUEST', message: 'amount below the minimum' })
  }
  t.same(await rows(url), [{ scope: 'swap', key: 'k1', state: 'done', status: 400 }])
})

t.test('any other error releases the key, so a retry runs fn again', async (t) => {
  const url = await freshDatabase(t)
  const s = await store(t, url)
  const error = await failure(s.run('swap', 'k1', fp, () => Promise.reject(new Error('rpc unreachable'))))
  t.equal(error.message, 'rpc unreachable')
  t.same(await rows(url), [])
  t.same(await s.run('swap', 'k1', fp, async () => '0x1'), { result: '0x1', replayed: false })
})

t.test('a result that is not JSON fails its caller and is kept as a failure, never run again', async (t) => {
  const s = await store(t, await freshDatabase(t))
  const error = await failure(s.run('swap', 'k1', fp, async () => ({ amount: 1n })))
  t.ok(error instanceof TypeError)
  t.match(await failure(s.run('swap', 'k1', fp, never)), { statusCode: 500, code: 'ATS_ERR_IDEMPOTENCY_UNSTORABLE' })
})

t.test('a claim whose lease ran out (its process died) is taken over and fn runs again', async (t) => {
  const url = await freshDatabase(t)
  const s = await store(t, url)
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  await client.query(
    `INSERT INTO ${schema}.idempotency_keys (scope, key, fingerprint, state, owner, locked_until)
     VALUES ('swap', 'k1', $1, 'running', 'dead-process', now() - interval '1 second')`,
    [fp],
  )
  await client.end()
  t.same(await s.run('swap', 'k1', fp, async () => '0x2'), { result: '0x2', replayed: false })
  t.same(await rows(url), [{ scope: 'swap', key: 'k1', state: 'done', status: null }])
})

t.test('a replica that stops renewing its lease is taken over', async (t) => {
  const url = await freshDatabase(t)
  const pool = new pg.Pool({ connectionString: url })
  const dying = await createIdempotencyStore(pool, { schema, leaseMs: 150 })
  const survivor = await store(t, url, { leaseMs: 150, pollMs: 20 })
  const { first, done: stuck } = await runningOn(dying)
  await pool.end() // the replica loses its database: no more renewals
  t.same(await survivor.run('swap', 'k1', fp, async () => '0x2'), { result: '0x2', replayed: false })
  stuck.resolve('0x1')
  t.same(await first, { result: '0x1', replayed: false }, 'the stuck call still answers its own caller')
  t.same(await survivor.run('swap', 'k1', fp, never), { result: '0x2', replayed: true })
})

t.test('a live claim is renewed; a repeat that waits past waitMs gets 409 in progress', async (t) => {
  const url = await freshDatabase(t)
  const a = await store(t, url, { leaseMs: 100 })
  const b = await store(t, url, { waitMs: 400, pollMs: 20 })
  const { first, done } = await runningOn(a)
  const began = Date.now()
  const error = await failure(b.run('swap', 'k1', fp, never))
  t.match(error, inProgress)
  t.ok(Date.now() - began >= 380, 'waited waitMs, past several lease lengths')
  done.resolve('0x1')
  t.same(await first, { result: '0x1', replayed: false })
})

t.test('in this process too, a repeat waits at most waitMs', async (t) => {
  const s = await store(t, await freshDatabase(t), { waitMs: 100 })
  const done = deferred<string>()
  const first = s.run('swap', 'k1', fp, () => done.promise)
  t.match(await failure(s.run('swap', 'k1', fp, never)), inProgress)
  done.resolve('0x1')
  t.same(await first, { result: '0x1', replayed: false })
})

t.test('replicas starting together create the table once', async (t) => {
  const url = await freshDatabase(t)
  const stores = await Promise.all(Array.from({ length: 5 }, () => createIdempotencyStore(url, { schema })))
  await Promise.all(stores.map((s) => s.close()))
  t.same(await rows(url), [])
})

t.test('purge deletes finished keys older than asked', async (t) => {
  const url = await freshDatabase(t)
  const s = await store(t, url)
  await s.run('swap', 'k1', fp, async () => 1)
  t.equal(await s.purge(60_000), 0)
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal(await s.purge(10), 1)
  t.same(await rows(url), [])
})

t.test('fingerprintOf ignores key order and tells requests apart', async (t) => {
  t.equal(fingerprintOf({ a: 1, b: { c: [1, 2], d: 'x' } }), fingerprintOf({ b: { d: 'x', c: [1, 2] }, a: 1 }))
  t.equal(fingerprintOf({ a: 1, skipped: undefined }), fingerprintOf({ a: 1 }))
  t.not(fingerprintOf({ a: 1 }), fingerprintOf({ a: 2 }))
  t.not(fingerprintOf([1, 2]), fingerprintOf([2, 1]))
  t.equal(fingerprintOf({ amount: 10n }), fingerprintOf({ amount: '10' }))
  t.match(fingerprintOf(null), /^[0-9a-f]{64}$/)
})

t.test('idempotencyKeyOf reads and checks the Idempotency-Key header', async (t) => {
  t.equal(idempotencyKeyOf({}), undefined)
  t.equal(idempotencyKeyOf({ 'idempotency-key': 'swap-2024-01-01 #1' }), 'swap-2024-01-01 #1')
  t.equal(idempotencyKeyOf({ 'idempotency-key': 'k'.repeat(255) }), 'k'.repeat(255))
  for (const bad of ['', 'k'.repeat(256), 'clé', 'a\tb', ['a', 'b']]) {
    t.throws(() => idempotencyKeyOf({ 'idempotency-key': bad }), {
      statusCode: 400,
      code: 'ATS_ERR_IDEMPOTENCY_KEY_INVALID',
      message: 'the Idempotency-Key header must be one value of 1 to 255 printable ASCII characters',
    })
  }
})
