// A kit service as its callers see it: HTTP answers (health, readiness, identity, errors,
// metrics, shutdown, logs), the input rules every route gets, and NATS endpoints called over RPC.
import { Writable } from 'node:stream'
import { InvalidAmount, RecipientNotAllowed, ServerWalletNotConfigured } from '@ats/chain'
import { endpoint, FreeText, identityHeaders } from '@ats/contracts'
import pino from 'pino'
import t, { type Test } from 'tap'
import { Type } from 'typebox'
import { createError, NotFound, Unavailable } from '../src/errors.ts'
import { callContextOf } from '../src/identity.ts'
import { loggerOptions } from '../src/logger.ts'
import { addNatsService, callEndpoint, serveEndpoint } from '../src/rpc.ts'
import { createService, type ServiceDefinition } from '../src/service.ts'
import { freshNamespace, startService, testInfra, testInternalToken } from '../src/testing.ts'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'

// HTTP: a probe service, one started per test
const probe: ServiceDefinition<{}, never> = {
  name: 'probe',
  version: '1.2.3',
  port: 0,
  async register(app, { addReadinessCheck }) {
    let healthy = true
    addReadinessCheck('flaky', async () => {
      if (!healthy) throw new Error('down')
    })
    const api = app.withTypeProvider<TypeBoxTypeProvider>()
    api.post('/flaky', async () => {
      healthy = !healthy
      return { healthy }
    })
    api.get('/whoami', async (request) => request.identity)
    api.get('/boom', async () => {
      throw new Error('secret detail from deep inside')
    })
    api.get('/wallet', async () => {
      throw new Unavailable('server wallet not configured')
    })
    // the chain package's errors are classes with a code and a status, not the kit's createError
    const chainErrors = {
      amount: () => new InvalidAmount('amountIn must be greater than 0'),
      recipient: () => new RecipientNotAllowed('recipient 0x0 is not allowed for key k'),
      wallet: () => new ServerWalletNotConfigured(),
    }
    api.get('/chain/:error', async (request) => {
      throw chainErrors[(request.params as { error: keyof typeof chainErrors }).error]()
    })
    api.post(
      '/items',
      {
        schema: {
          body: Type.Object({ name: Type.String({ maxLength: 3 }), kind: Type.Unsafe<string>({ type: 'string', enum: ['a', 'b'] }) }),
        },
      },
      async (request) => request.body,
    )
    api.get('/slow', async () => {
      await new Promise((resolve) => setTimeout(resolve, 300))
      return { done: true }
    })
  },
}

async function start(t: Test) {
  const { natsUrl } = await testInfra()
  return startService(t, probe, { NATS_URL: natsUrl, INTERNAL_TOKEN: testInternalToken, LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0' })
}

const internal = { [identityHeaders.internalToken]: testInternalToken }

t.test('health answers ok and a timestamp', async (t) => {
  const svc = await start(t)
  const res = await fetch(`${svc.url}/health`)
  const body = (await res.json()) as { ok: boolean; ts: number }
  t.equal(res.status, 200)
  t.equal(body.ok, true)
  t.ok(Math.abs(body.ts - Date.now()) < 5000)
})

t.test('ready answers 503 with {error} naming what is down, and 200 once it is back', async (t) => {
  const svc = await start(t)
  t.same(await (await fetch(`${svc.url}/ready`)).json(), { ready: true, checks: ['flaky', 'nats'] })
  await fetch(`${svc.url}/flaky`, { method: 'POST', headers: internal })
  const down = await fetch(`${svc.url}/ready`)
  t.equal(down.status, 503)
  t.same(await down.json(), { error: 'not ready: flaky unreachable' })
})

t.test('a request without the internal token is refused with 401', async (t) => {
  const svc = await start(t)
  const res = await fetch(`${svc.url}/whoami`, { headers: { [identityHeaders.ownerId]: 'forged' } })
  t.equal(res.status, 401)
  t.same(await res.json(), { error: 'this service answers only requests forwarded by the gateway' })
  const wrong = await fetch(`${svc.url}/whoami`, { headers: { [identityHeaders.internalToken]: 'x'.repeat(testInternalToken.length) } })
  t.equal(wrong.status, 401)
})

t.test('identity headers from the gateway reach the handler', async (t) => {
  const svc = await start(t)
  const res = await fetch(`${svc.url}/whoami`, {
    headers: { ...internal, [identityHeaders.keyId]: 'key_1', [identityHeaders.ownerId]: 'key_1', [identityHeaders.tier]: 'readwrite' },
  })
  t.same(await res.json(), { ownerId: 'key_1', keyId: 'key_1', tier: 'readwrite' })
})

t.test('an unexpected error answers 500 without its detail', async (t) => {
  const svc = await start(t)
  const res = await fetch(`${svc.url}/boom`, { headers: internal })
  t.equal(res.status, 500)
  const text = await res.text()
  t.same(JSON.parse(text), { error: 'internal server error' })
  t.notMatch(text, /secret detail|at /)
})

t.test('a registry error keeps its status and message', async (t) => {
  const svc = await start(t)
  const res = await fetch(`${svc.url}/wallet`, { headers: internal })
  t.equal(res.status, 503)
  t.same(await res.json(), { error: 'server wallet not configured' })
})

t.test("the chain package's errors keep their status and message", async (t) => {
  const svc = await start(t)
  for (const [error, status, message] of [
    ['amount', 400, 'amountIn must be greater than 0'],
    ['recipient', 403, 'recipient 0x0 is not allowed for key k'],
    ['wallet', 503, 'server wallet not configured'],
  ] as const) {
    const res = await fetch(`${svc.url}/chain/${error}`, { headers: internal })
    t.equal(res.status, status, error)
    t.same(await res.json(), { error: message })
  }
})

t.test('invalid input answers 400 saying what is wrong', async (t) => {
  const svc = await start(t)
  const post = (body: string) =>
    fetch(`${svc.url}/items`, { method: 'POST', headers: { ...internal, 'content-type': 'application/json' }, body })
  const cases: Array<[string, string]> = [
    ['{"kind":"a"}', 'Missing required params: name (body)'],
    ['{}', 'Missing required params: name, kind (body)'],
    ['{"name":"long!","kind":"a"}', 'body/name must NOT have more than 3 characters'],
    ['{"name":"ok","kind":"c"}', 'body/kind must be equal to one of the allowed values: a, b'],
  ]
  for (const [body, error] of cases) {
    const res = await post(body)
    t.equal(res.status, 400, body)
    t.same(await res.json(), { error }, body)
  }
  const broken = await post('{"name":')
  t.equal(broken.status, 400)
  t.match(await broken.json(), { error: String })
})

t.test('an unknown route answers 404 {error}', async (t) => {
  const svc = await start(t)
  const res = await fetch(`${svc.url}/nope?x=1`, { headers: internal })
  t.equal(res.status, 404)
  t.same(await res.json(), { error: 'no route GET /nope' })
})

t.test('metrics are exposed for Prometheus', async (t) => {
  const svc = await start(t)
  await fetch(`${svc.url}/whoami`, { headers: internal })
  const text = await (await fetch(`${svc.url}/metrics`)).text()
  t.match(text, /http_request_duration_seconds_count\{service="probe",method="GET",route="\/whoami",status="200"\} 1/)
  t.match(text, /process_cpu_user_seconds_total/)
})

t.test("a service's own counters and gauges are on /metrics, labelled with the service", async (t) => {
  let depth = 7
  const shop: ServiceDefinition<{}, never> = {
    name: 'shop',
    version: '1.0.0',
    port: 0,
    async register(app, { metrics }) {
      const orders = metrics.counter({ name: 'shop_orders_total', help: 'orders by outcome', labels: { outcome: ['filled', 'refused'] } })
      metrics.gauge({
        name: 'shop_orders_waiting',
        help: 'orders waiting',
        collect: (gauge) => {
          if (depth < 0) throw new Error('the order book is unreachable')
          gauge.set({}, depth)
        },
      })
      app.post('/order', async () => {
        orders.inc({ outcome: 'filled' })
        return { filled: true }
      })
    },
  }
  const { natsUrl } = await testInfra()
  const svc = await startService(t, shop, {
    NATS_URL: natsUrl,
    INTERNAL_TOKEN: testInternalToken,
    LOG_LEVEL: 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
  })
  const scrape = async () => {
    const res = await fetch(`${svc.url}/metrics`)
    t.equal(res.status, 200)
    return res.text()
  }
  // every declared label value has its series before anything happened
  t.match(await scrape(), /shop_orders_total\{outcome="refused",service="shop"\} 0\n/)
  await fetch(`${svc.url}/order`, { method: 'POST', headers: internal })
  let text = await scrape()
  t.match(text, /# HELP shop_orders_total orders by outcome/)
  t.match(text, /shop_orders_total\{outcome="filled",service="shop"\} 1\n/)
  t.match(text, /shop_orders_total\{outcome="refused",service="shop"\} 0\n/)
  t.match(text, /shop_orders_waiting\{service="shop"\} 7\n/)
  // a gauge whose source fails keeps its last value, and the scrape still answers
  depth = -1
  text = await scrape()
  t.match(text, /shop_orders_waiting\{service="shop"\} 7\n/)
  t.match(text, /http_request_duration_seconds_count\{service="shop",method="POST",route="\/order",status="200"\} 1/)
})

t.test('shutdown lets in-flight requests finish, then drains NATS', async (t) => {
  const svc = await start(t)
  const pending = fetch(`${svc.url}/slow`, { headers: internal })
  await new Promise((resolve) => setTimeout(resolve, 50))
  await svc.close()
  const res = await pending
  t.equal(res.status, 200)
  t.same(await res.json(), { done: true })
  t.ok(svc.ctx.nc.isClosed(), 'NATS connection closed')
  await t.rejects(fetch(`${svc.url}/health`), 'no longer listening')
})

t.test('credentials in logged headers are redacted', async (t) => {
  const lines: string[] = []
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk))
      done()
    },
  })
  const log = pino(loggerOptions('probe', 'info'), sink)
  log.info(
    { req: { headers: { authorization: 'Bearer atsk_secret', 'x-api-key': 'atsk_other', 'x-payment': 'sig', accept: 'json' } } },
    'in',
  )
  t.notMatch(lines.join(''), /atsk_secret|atsk_other|"sig"/)
  t.match(lines.join(''), /"accept":"json"/)
})

// input rules: one service for these tests, started now
/** A route with every kind of field the kit's rules cover: an id in the path, query values, a label, free text, numbers, a free-form record. */
const itemSchema = {
  params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }),
  querystring: Type.Object(
    { limit: Type.Optional(Type.Integer({ minimum: 1 })), q: Type.Optional(Type.String()) },
    { additionalProperties: false },
  ),
  body: Type.Object(
    {
      label: Type.String({ maxLength: 64 }),
      prompt: Type.Optional(FreeText()),
      amount: Type.Optional(Type.Number()),
      config: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    },
    { additionalProperties: false },
  ),
}

const itemsProbe: ServiceDefinition<{}, never> = {
  name: 'probe',
  version: '1.0.0',
  port: 0,
  async register(app) {
    const api = app.withTypeProvider<TypeBoxTypeProvider>()
    api.post('/items/:id', { schema: itemSchema }, async (request) => ({ id: request.params.id, query: request.query, body: request.body }))
  },
}

const { natsUrl } = await testInfra()
const svc = await startService(t, itemsProbe, {
  NATS_URL: natsUrl,
  INTERNAL_TOKEN: testInternalToken,
  LOG_LEVEL: 'silent',
  HOST: '127.0.0.1',
  PORT: '0',
})

/** POST /items/:id with a raw path, query and JSON text: the status and the answer. */
async function post(path: string, body: string) {
  const res = await fetch(`${svc.url}/items/${path}`, {
    method: 'POST',
    headers: { [identityHeaders.internalToken]: testInternalToken, 'content-type': 'application/json' },
    body,
  })
  return { status: res.status, body: (await res.json()) as any }
}

t.test('a request within the rules passes, tabs and line breaks in free text included', async (t) => {
  const res = await post(
    'item-1?limit=10&q=swap',
    JSON.stringify({ label: 'main', prompt: 'buy\tETH\r\nthen sell', amount: 1.5, config: { note: ['x'] } }),
  )
  t.equal(res.status, 200, JSON.stringify(res.body))
  t.same(res.body.query, { limit: 10, q: 'swap' })
  t.equal(res.body.body.prompt, 'buy\tETH\r\nthen sell')
})

t.test('a control character in a path parameter, a query value or a label answers 400 naming the field', async (t) => {
  const label = (value: string) => JSON.stringify({ label: value })
  const cases: Array<[string, string, string]> = [
    ['a%00b', label('x'), 'params/id must not contain control characters (found U+0000)'],
    ['x?q=a%00b', label('x'), 'querystring/q must not contain control characters (found U+0000)'],
    ['x?q=line%0Abreak', label('x'), 'querystring/q must not contain control characters (found U+000A)'],
    ['x', label('two\nlines'), 'body/label must not contain control characters (found U+000A)'],
    ['x', label('bell\u0007'), 'body/label must not contain control characters (found U+0007)'],
    ['x', label('del\u007f'), 'body/label must not contain control characters (found U+007F)'],
  ]
  for (const [path, body, error] of cases) {
    const res = await post(path, body)
    t.equal(res.status, 400, `${path} ${body}`)
    t.same(res.body, { error }, `${path} ${body}`)
  }
})

t.test('free text refuses NUL and the other control characters, but not tab, CR and LF', async (t) => {
  for (const [bad, code] of [
    ['\u0000', 'U+0000'],
    ['\u001b', 'U+001B'],
  ]) {
    const res = await post('x', JSON.stringify({ label: 'x', prompt: `a${bad}b` }))
    t.equal(res.status, 400)
    t.same(res.body, {
      error: `body/prompt must not contain control characters other than tab, line feed and carriage return (found ${code})`,
    })
  }
})

t.test('a NUL anywhere inside a free-form record answers 400 naming where', async (t) => {
  const value = await post('x', JSON.stringify({ label: 'x', config: { note: ['ok', 'a\u0000b'] } }))
  t.equal(value.status, 400)
  t.same(value.body, { error: 'body/config/note/1 must not contain NUL characters (U+0000)' })
  const key = await post('x', JSON.stringify({ label: 'x', config: { 'a\u0000b': 1 } }))
  t.equal(key.status, 400)
  t.same(key.body, { error: 'body/config/a\\u0000b must not have NUL characters (U+0000) in its name' })
})

t.test('1e309, NaN and integers beyond the safe range answer 400 naming the parameter', async (t) => {
  const label = JSON.stringify({ label: 'x' })
  const unsafe = 'querystring/limit must be an integer between -9007199254740991 and 9007199254740991'
  const cases: Array<[string, string, string]> = [
    ['x?limit=1e309', label, unsafe],
    ['x?limit=9007199254740993', label, unsafe],
    ['x?limit=NaN', label, 'querystring/limit must be integer'],
    // JSON.parse reads 1e309 as Infinity, which Ajv's number type refuses
    ['x', '{"label":"x","amount":1e309}', 'body/amount must be number'],
    ['x', '{"label":"x","amount":-1e309}', 'body/amount must be number'],
    ['x', '{"label":"x","config":{"deep":[1e309]}}', 'body/config/deep/0 must be a finite number'],
  ]
  for (const [path, body, error] of cases) {
    const res = await post(path, body)
    t.equal(res.status, 400, `${path} ${body}`)
    t.same(res.body, { error }, `${path} ${body}`)
  }
})

t.test("the route's own schema objects are left as they were (contracts are shared)", async (t) => {
  t.notOk('controlCharacters' in itemSchema.params.properties.id)
  t.notOk('safeContent' in itemSchema.body)
  t.notOk('safeNumber' in (itemSchema.querystring.properties.limit as object))
})

// NATS RPC: endpoints answering over NATS, called from HTTP routes
const Conflict = createError<[string]>('ATS_ERR_TEST_CONFLICT', '%s', 409)
const lookup = (namespace: string) =>
  endpoint(`${namespace}.books.lookup`, Type.Object({ id: Type.String() }), Type.Object({ title: Type.String(), askedBy: Type.String() }))

/** the "slow" lookups books has begun: they answer 300 ms later */
const slowStarted: Array<() => void> = []

/** books answers over NATS: 404 for an unknown id, 409 for a taken one, a crash for "boom", "slow" after 300 ms. */
const books = (namespace: string): ServiceDefinition<{}, never> => ({
  name: 'books',
  version: '1.0.0',
  port: 0,
  async register(_app, { nc, log, onClose }) {
    const service = await addNatsService(nc, `books-${namespace}`, '1.0.0', 'test books')
    onClose(() => service.stop().then(() => undefined))
    serveEndpoint(service, lookup(namespace), log, async ({ id }, { identity, requestId }) => {
      if (id === 'missing') throw new NotFound(`book ${id}`)
      if (id === 'taken') throw new Conflict('book taken is lent out')
      if (id === 'boom') throw new Error('secret stack detail')
      if (id === 'slow') {
        for (const started of slowStarted.splice(0)) started()
        await new Promise((resolve) => setTimeout(resolve, 300))
      }
      return { title: `title of ${id}`, askedBy: `${identity.keyId ?? '-'} ${requestId ?? '-'}` }
    })
  },
})

/** shelf answers HTTP by asking books over NATS. */
const shelf = (namespace: string, timeoutMs: number): ServiceDefinition<{}, never> => ({
  name: 'shelf',
  version: '1.0.0',
  port: 0,
  async register(app, { nc }) {
    app.get<{ Params: { id: string } }>('/books/:id', async (request) =>
      callEndpoint(nc, lookup(namespace), { id: request.params.id }, { ...callContextOf(request), timeoutMs }),
    )
  },
})

async function env(t: Parameters<typeof freshNamespace>[0]) {
  const { natsUrl } = await testInfra()
  const NATS_NAMESPACE = await freshNamespace(t)
  return { NATS_URL: natsUrl, NATS_NAMESPACE, INTERNAL_TOKEN: testInternalToken, LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0' }
}

/** books answering over NATS, shelf asking it over HTTP; both closed when the test ends. */
async function booksAndShelf(t: Parameters<typeof freshNamespace>[0], timeoutMs = 2000) {
  const e = await env(t)
  const responder = await createService(books(e.NATS_NAMESPACE), e)
  t.teardown(() => responder.close())
  const caller = await createService(shelf(e.NATS_NAMESPACE, timeoutMs), e)
  t.teardown(() => caller.close())
  return { responder, caller }
}

const asKey = {
  [identityHeaders.internalToken]: testInternalToken,
  [identityHeaders.keyId]: 'key_7',
  [identityHeaders.requestId]: 'req-42',
}

t.test('an endpoint answers its caller, who learns who asked and under which request id', async (t) => {
  const { caller } = await booksAndShelf(t)
  const res = await caller.app.inject({ url: '/books/b1', headers: asKey })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { title: 'title of b1', askedBy: 'key_7 req-42' })
})

t.test("an endpoint's 404 and 409 reach the HTTP caller as 404 and 409; a crash as 502 without detail", async (t) => {
  const { caller } = await booksAndShelf(t)
  const missing = await caller.app.inject({ url: '/books/missing', headers: asKey })
  t.equal(missing.statusCode, 404)
  t.same(missing.json(), { error: 'book missing not found' })
  const taken = await caller.app.inject({ url: '/books/taken', headers: asKey })
  t.equal(taken.statusCode, 409)
  t.same(taken.json(), { error: 'book taken is lent out' })
  const boom = await caller.app.inject({ url: '/books/boom', headers: asKey })
  t.equal(boom.statusCode, 502)
  t.notMatch(boom.body, /secret/)
  t.match(boom.json(), { error: /books service failed/ })
})

t.test('a stopped responder gives 503 within the timeout, not a 500', async (t) => {
  const { responder, caller } = await booksAndShelf(t)
  t.equal((await caller.app.inject({ url: '/books/b1', headers: asKey })).statusCode, 200)
  await responder.close()
  const started = Date.now()
  const res = await caller.app.inject({ url: '/books/b1', headers: asKey })
  t.equal(res.statusCode, 503)
  t.same(res.json(), { error: 'books service unavailable' })
  t.ok(Date.now() - started < 2000, `answered in ${Date.now() - started} ms, within the 2000 ms timeout`)
})

t.test('a responder told to stop answers the requests it already took before its connection closes', async (t) => {
  const { responder, caller } = await booksAndShelf(t)
  const began = new Promise<void>((resolve) => slowStarted.push(resolve))
  const asked = caller.app.inject({ url: '/books/slow', headers: asKey })
  await began
  const closed = responder.close()
  const res = await asked
  t.equal(res.statusCode, 200, `answered ${res.statusCode} ${res.body}`)
  t.same(res.json(), { title: 'title of slow', askedBy: 'key_7 req-42' })
  await closed
  t.ok(responder.ctx.nc.isClosed(), 'then its NATS connection closed')
})

t.test('a responder that does not answer in time gives 504 {error}', async (t) => {
  const e = await env(t)
  const { connect } = await import('nats')
  // a bare subscriber that takes the request and never answers
  const silent = await connect({ servers: e.NATS_URL })
  t.teardown(() => silent.close())
  silent.subscribe(lookup(e.NATS_NAMESPACE).subject)
  await silent.flush()
  const caller = await createService(shelf(e.NATS_NAMESPACE, 300), e)
  t.teardown(() => caller.close())
  const res = await caller.app.inject({ url: '/books/b1', headers: asKey })
  t.equal(res.statusCode, 504)
  t.same(res.json(), { error: 'books service did not answer within 300 ms' })
})

t.test('an endpoint is discovered under its subject past the service, dots as dashes', async (t) => {
  const e = await env(t)
  const { connect } = await import('nats')
  const nc = await connect({ servers: e.NATS_URL })
  const service = await addNatsService(nc, `shelves-${e.NATS_NAMESPACE}`, '1.0.0', 'test shelves')
  t.teardown(async () => {
    await service.stop()
    await nc.close()
  })
  const log = pino({ level: 'silent' })
  const Id = Type.Object({ id: Type.String() })
  const nested = endpoint(`${e.NATS_NAMESPACE}.books.shelf.of-book`, Id, Id)
  serveEndpoint(service, lookup(e.NATS_NAMESPACE), log, async ({ id }) => ({ title: id, askedBy: '-' }))
  serveEndpoint(service, nested, log, async (request) => request)
  const discovered: Array<{ name: string; subject: string }> = []
  for await (const info of await nc.services.client().info(service.info().name))
    discovered.push(...info.endpoints.map(({ name, subject }) => ({ name, subject })))
  t.same(discovered, [
    { name: 'lookup', subject: lookup(e.NATS_NAMESPACE).subject },
    { name: 'shelf-of-book', subject: nested.subject },
  ])
})

// The context follows the declaration: pnpm typecheck checks these lines, and fails if an
// expected error goes away (a service without `chain` reaching ctx.chain would compile).
t.test('ctx has db and chain only when the definition declares them', async (t) => {
  const reader: ServiceDefinition<{}, never, 'read'> = {
    name: 'reader',
    version: '0.0.0',
    port: 0,
    chain: 'read',
    async register(_app, ctx) {
      void ctx.chain.publicClient
      // @ts-expect-error no `database`: no ctx.db
      void ctx.db
    },
  }
  const plain: ServiceDefinition<{}, never> = {
    name: 'plain',
    version: '0.0.0',
    port: 0,
    async register(_app, ctx) {
      // @ts-expect-error no `chain`: no ctx.chain
      void ctx.chain
    },
  }
  // @ts-expect-error typed as a chain writer, it must declare chain: 'write'
  const undeclared: ServiceDefinition<{}, never, 'write'> = { name: 'writer', version: '0.0.0', port: 0, async register() {} }
  t.same([reader.chain, plain.chain, undeclared.chain], ['read', undefined, undefined])
})
