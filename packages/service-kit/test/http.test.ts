// The outbound HTTP client against a local server: answers, retries, deadlines and how failures reach a client.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { NotFound, installErrorHandler } from '../src/errors.ts'
import { UpstreamStatusError } from '../src/errors.ts'
import { createHttpClient, type HttpClientOptions } from '../src/http.ts'

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void

/** A server on a free port whose handler the test writes; counts the requests it got. */
async function upstream(t: Test, handler: Handler) {
  const seen: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }> = []
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (chunk) => (body += chunk))
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body })
      handler(req, res, body)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise((resolve) => server.close(resolve))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
}

function client(t: Test, baseUrl: string, options: Partial<HttpClientOptions> = {}) {
  const http = createHttpClient({ name: 'quotes', baseUrl, timeoutMs: 2000, ...options })
  t.teardown(() => http.close())
  return http
}

const json = (res: ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers })
  res.end(JSON.stringify(value))
}

/** The error a call failed with; a call that succeeds fails the test. */
const failure = (call: Promise<unknown>) =>
  call.then(
    (value) => {
      throw new Error(`expected a failure, got ${JSON.stringify(value)}`)
    },
    (error: Error & Record<string, unknown>) => error,
  )

/** Answers `statuses` in turn, then the last one forever. */
const sequence = (...statuses: number[]): Handler => {
  let i = 0
  return (_req, res) => {
    const status = statuses[Math.min(i++, statuses.length - 1)]!
    json(res, status, status < 300 ? { ok: true } : { error: 'nope' })
  }
}

t.test('answers parsed JSON; base path, query and headers are combined', async (t) => {
  const server = await upstream(t, (req, res) => json(res, 200, { url: req.url }))
  const http = client(t, `${server.url}/api/v3?key=secret`, { headers: { 'x-api-key': 'k' } })
  const answer = await http.getJson<{ url: string }>('/simple/price', { query: { ids: 'btc', vs: ['usd', 'eur'], skip: undefined } })
  t.same(answer, { url: '/api/v3/simple/price?key=secret&ids=btc&vs=usd&vs=eur' })
  t.equal(server.seen[0]!.headers['x-api-key'], 'k')
  t.equal(server.seen[0]!.headers.accept, 'application/json')
})

t.test('an empty 204 answers undefined', async (t) => {
  const server = await upstream(t, (_req, res) => res.writeHead(204).end())
  t.equal(await client(t, server.url).getJson('/x'), undefined)
})

t.test('a 503 then a 200 is retried to success', async (t) => {
  const server = await upstream(t, sequence(503, 200))
  t.same(await client(t, server.url).getJson('/x'), { ok: true })
  t.equal(server.seen.length, 2)
})

t.test('a persistent 500 fails with a 502 registry error, not retried', async (t) => {
  const server = await upstream(t, sequence(500))
  const error = await failure(client(t, server.url).getJson('/x'))
  t.match(error, { statusCode: 502, code: 'ATS_ERR_UPSTREAM_FAILED', message: 'quotes failed: 500 Internal Server Error' })
  t.equal(server.seen.length, 1)
})

t.test('a persistent 503 is retried `retries` times, then fails with 502', async (t) => {
  const server = await upstream(t, sequence(503))
  const error = await failure(client(t, server.url, { retries: 2 }).getJson('/x'))
  t.match(error, { statusCode: 502, message: 'quotes failed: 503 Service Unavailable' })
  t.equal(server.seen.length, 3)
})

t.test('a server that never answers fails with 503 at the deadline', async (t) => {
  const server = await upstream(t, () => {})
  const started = Date.now()
  const error = await failure(client(t, server.url, { timeoutMs: 300 }).getJson('/x'))
  const took = Date.now() - started
  t.match(error, { statusCode: 503, code: 'ATS_ERR_UPSTREAM_TIMEOUT', message: 'quotes did not answer within 300 ms' })
  t.ok(took >= 290 && took < 800, `took ${took} ms`)
})

t.test("the caller's signal ends the call at once, the request in flight included, and nothing is retried", async (t) => {
  const server = await upstream(t, () => {})
  const http = client(t, server.url, { timeoutMs: 5_000, retries: 2 })
  const controller = new AbortController()
  const reason = new Error('the worker is stopping')
  const started = Date.now()
  const call = http.postJson('/x', { a: 1 }, { retry: true, signal: controller.signal })
  while (server.seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 10))
  controller.abort(reason)
  t.equal(await failure(call), reason, "rejects with the signal's reason")
  t.ok(Date.now() - started < 1_000, `ended after ${Date.now() - started} ms, not at the 5 s deadline`)
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.equal(server.seen.length, 1, 'not retried')
})

t.test('a body that stalls after the headers also ends at the deadline', async (t) => {
  const server = await upstream(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"partial":')
  })
  const started = Date.now()
  const error = await failure(client(t, server.url).getJson('/x', { timeoutMs: 300 }))
  t.match(error, { statusCode: 503, message: 'quotes did not answer within 300 ms' })
  t.ok(Date.now() - started < 800)
})

t.test('a slow attempt is retried within the deadline when attempts have their own timeout', async (t) => {
  let calls = 0
  const server = await upstream(t, (_req, res) => {
    if (calls++ > 0) json(res, 200, { ok: true })
  })
  t.same(await client(t, server.url, { timeoutMs: 2000, attemptTimeoutMs: 200 }).getJson('/x'), { ok: true })
  t.equal(server.seen.length, 2)
})

t.test('a 429 waits for retry-after, then succeeds', async (t) => {
  let calls = 0
  const server = await upstream(t, (_req, res) =>
    calls++ === 0 ? json(res, 429, {}, { 'retry-after': '1' }) : json(res, 200, { ok: true }),
  )
  const started = Date.now()
  t.same(await client(t, server.url).getJson('/x'), { ok: true })
  t.ok(Date.now() - started >= 950, 'waited about a second')
})

t.test('a 429 asking for a long wait is not retried', async (t) => {
  const server = await upstream(t, (_req, res) => json(res, 429, {}, { 'retry-after': '60' }))
  const error = await failure(client(t, server.url).getJson('/x'))
  t.match(error, {
    statusCode: 503,
    code: 'ATS_ERR_UPSTREAM_RATE_LIMITED',
    message: 'quotes is rate limiting our requests (429 Too Many Requests); try again later',
  })
  t.equal(server.seen.length, 1)
})

t.test('POST is not retried unless the call says so', async (t) => {
  const server = await upstream(t, sequence(503, 503, 200))
  const http = client(t, server.url)
  const error = await failure(http.postJson('/swap', { amount: '1' }))
  t.match(error, { statusCode: 502 })
  t.equal(server.seen.length, 1)
  t.equal(server.seen[0]!.body, '{"amount":"1"}')
  t.equal(server.seen[0]!.headers['content-type'], 'application/json')
  t.same(await http.postJson('/swap', { amount: '1' }, { retry: true }), { ok: true })
  t.equal(server.seen.length, 3)
})

t.test('invalid JSON fails with 502', async (t) => {
  const server = await upstream(t, (_req, res) => res.writeHead(200).end('<html>oops</html>'))
  const error = await failure(client(t, server.url).getJson('/x'))
  t.match(error, { statusCode: 502, message: 'quotes failed: invalid JSON (status 200)' })
})

t.test('a 404 surfaces its status and body for the caller to decide', async (t) => {
  const server = await upstream(t, (_req, res) => json(res, 404, { error: 'coin not found' }))
  const error = await failure(client(t, server.url).getJson('/coins/nope'))
  t.ok(error instanceof UpstreamStatusError)
  t.match(error, { status: 404, body: { error: 'coin not found' }, statusCode: 502, code: 'ATS_ERR_UPSTREAM_STATUS' })
  t.equal(error.message, 'quotes answered 404 Not Found')
  t.equal(server.seen.length, 1, '4xx is not retried')
})

t.test('no connection fails with 502 after the retries, without the address or secrets', async (t) => {
  const closed = createServer()
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
  const port = (closed.address() as AddressInfo).port
  await new Promise((resolve) => closed.close(resolve))
  const http = client(t, `http://127.0.0.1:${port}?apikey=hunter2`, { headers: { authorization: 'Bearer hunter2' } })
  const error = await failure(http.getJson('/x'))
  t.match(error, { statusCode: 502, message: 'quotes failed: network error (ECONNREFUSED)' })
  t.notMatch(error.message, /hunter2|127\.0\.0\.1/)
})

t.test('through a route, the client sees {error} with 502 and 503', async (t) => {
  const server = await upstream(t, (req, res) => {
    if (req.url === '/down') return json(res, 500, { error: 'db exploded, key=hunter2' })
    if (req.url === '/coins/nope') return json(res, 404, { error: 'no such coin' })
  })
  const app = Fastify()
  installErrorHandler(app)
  const http = client(t, server.url, { timeoutMs: 300, log: app.log })
  app.get('/price/:path', async (request) => {
    const { path } = request.params as { path: string }
    try {
      return await http.getJson(`/${path.replace('-', '/')}`)
    } catch (error) {
      if (error instanceof UpstreamStatusError && error.status === 404) throw new NotFound('coin')
      throw error
    }
  })
  t.teardown(() => app.close())
  const down = await app.inject('/price/down')
  t.equal(down.statusCode, 502)
  t.same(down.json(), { error: 'quotes failed: 500 Internal Server Error' })
  const slow = await app.inject('/price/slow')
  t.equal(slow.statusCode, 503)
  t.same(slow.json(), { error: 'quotes did not answer within 300 ms' })
  const missing = await app.inject('/price/coins-nope')
  t.equal(missing.statusCode, 404)
  t.same(missing.json(), { error: 'coin not found' })
})
