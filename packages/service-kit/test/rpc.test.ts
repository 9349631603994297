import { endpoint, identityHeaders } from '@ats/contracts'
import t from 'tap'
import { Type } from 'typebox'
import { NotFound } from '../src/errors.ts'
import { callContextOf } from '../src/identity.ts'
import { addNatsService, callEndpoint, serveEndpoint } from '../src/rpc.ts'
import { createService, type ServiceDefinition } from '../src/service.ts'
import { freshNamespace, testInfra, testInternalToken } from '../src/testing.ts'
import { createError } from '../src/errors.ts'

const Conflict = createError<[string]>('ATS_ERR_TEST_CONFLICT', '%s', 409)
const lookup = (namespace: string) =>
  endpoint(`${namespace}.books.lookup`, Type.Object({ id: Type.String() }), Type.Object({ title: Type.String(), askedBy: Type.String() }))

/** books answers over NATS: 404 for an unknown id, 409 for a taken one, a crash for "boom". */
const books = (namespace: string): ServiceDefinition<{}, never> => ({
  name: 'books',
  version: '1.0.0',
  port: 0,
  async register(_app, { nc, log, onClose }) {
    const service = await addNatsService(nc, `books-${namespace}`, '1.0.0', 'test books')
    onClose(() => service.stop().then(() => undefined))
    serveEndpoint(service, 'lookup', lookup(namespace), log, async ({ id }, { identity, requestId }) => {
      if (id === 'missing') throw new NotFound(`book ${id}`)
      if (id === 'taken') throw new Conflict('book taken is lent out')
      if (id === 'boom') throw new Error('secret stack detail')
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

const asKey = { [identityHeaders.internalToken]: testInternalToken, [identityHeaders.keyId]: 'key_7', [identityHeaders.requestId]: 'req-42' }

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
