import { connect } from 'node:net'
import Fastify from 'fastify'
import t from 'tap'
import { eventually, startFleet } from '../fleet.ts'

/**
 * A request whose body comes a byte at a time must not hold one of its service's connections as
 * long as the client likes (as it would were the proxy to stream the body on), or a key's slow
 * POSTs starve every other caller of that service. Here the automation group has 4 connections
 * (UPSTREAM_CONNECTIONS), a whole request may take 15 s, and 26 slow POSTs are open.
 * Client addresses come from X-Forwarded-For (TRUST_PROXY names the test's loopback address).
 */
// 15 s: the checks below run while the 26 slow requests are open, and must finish before they time
// out (4 s, then 8 s, were too short on a loaded machine); their bodies take 25.6 s, so each still ends in 408
const requestTimeoutMs = 15_000
const arrivals: string[] = []
const automation = Fastify()
automation.addHook('onRequest', async (request) => {
  arrivals.push(`${request.method} ${request.url}`)
})
automation.all('/*', async (request) => ({ method: request.method, body: request.body ?? null }))
t.teardown(() => automation.close())
t.test('a body sent a byte at a time does not hold a connection', async (t) => {
  const automationUrl = await automation.listen({ port: 0, host: '127.0.0.1' })

  const { gateway, request, createKey } = await startFleet(t, {
    otherServices: automationUrl,
    gatewayEnv: {
      TRUST_PROXY: '127.0.0.1',
      UPSTREAM_CONNECTIONS: '4',
      SERVER_HEADERS_TIMEOUT_MS: '1000',
      SERVER_REQUEST_TIMEOUT_MS: String(requestTimeoutMs),
      MAX_CONCURRENT_PER_KEY: '24',
      MAX_CONCURRENT_PER_ADDRESS: '26',
    },
  })
  const { port } = new URL(gateway.url)

  interface SlowAnswer {
    status: number
    body: string
    ms: number
  }

  /** POST /automations whose 128-byte body comes one byte every 200 ms; resolves with the answer once the gateway closes */
  function slowPost(key: string, address: string): { answer: Promise<SlowAnswer>; ended?: SlowAnswer; stop(): void } {
    const started = Date.now()
    const socket = connect(Number(port), '127.0.0.1')
    const head = [
      'POST /automations HTTP/1.1',
      'host: gateway',
      `authorization: Bearer ${key}`,
      `x-forwarded-for: ${address}`,
      'content-type: application/json',
      'content-length: 128',
    ]
    socket.write(`${head.join('\r\n')}\r\n\r\n{`)
    const drip = setInterval(() => socket.writable && socket.write(' '), 200)
    const chunks: Buffer[] = []
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', () => {})
    const slow: { answer: Promise<SlowAnswer>; ended?: SlowAnswer; stop(): void } = {
      answer: new Promise<SlowAnswer>((resolve) =>
        socket.once('close', () => {
          clearInterval(drip)
          const text = Buffer.concat(chunks).toString()
          slow.ended = {
            status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0),
            body: text.split('\r\n\r\n')[1] ?? '',
            ms: Date.now() - started,
          }
          resolve(slow.ended)
        }),
      ),
      stop: () => socket.destroy(),
    }
    return slow
  }

  t.test('slow bodies hold no connection to the service, are capped per key and address, and end with 408 in time', async (t) => {
    const slowKey = (await createKey('readwrite', 'slow')).key
    const otherKey = (await createKey('readwrite', 'other')).key
    const thirdKey = (await createKey('readwrite', 'third')).key
    const as = (key: string, address: string) => ({ key, headers: { 'x-forwarded-for': address } })
    // the keys are known to the gateway before the clock starts (a lookup at admin takes a moment)
    for (const key of [slowKey, otherKey, thirdKey]) t.equal((await request('/automations', as(key, '203.0.113.42'))).status, 200)
    // 24 slow requests of one key and 2 of another, all from one address
    const slow = [
      ...Array.from({ length: 24 }, () => slowPost(slowKey, '203.0.113.40')),
      slowPost(thirdKey, '203.0.113.40'),
      slowPost(thirdKey, '203.0.113.40'),
    ]
    t.teardown(() => {
      for (const s of slow) s.stop()
    })
    const byAddress = await eventually('26 requests in flight from one address', async () => {
      const early = slow.find((s) => s.ended)?.ended
      if (early) throw new Error(`a slow request ended before the checks: ${JSON.stringify(early)}`)
      const res = await request('/automations', as(otherKey, '203.0.113.40'))
      return res.status === 429 ? res : undefined
    })
    t.same(byAddress.body, {
      error: 'too many requests in flight for this client address (at most 26 at once); retry when one has finished',
    })
    t.equal(byAddress.headers.get('retry-after'), '1')
    const byKey = await request('/automations', as(slowKey, '203.0.113.41'))
    t.equal(byKey.status, 429, "the slow key's 25th request in flight is refused, from any address")
    t.same(byKey.body, { error: 'too many requests in flight for this key (at most 24 at once); retry when one has finished' })

    const started = Date.now()
    const other = await request('/automations', as(otherKey, '203.0.113.41'))
    const ms = Date.now() - started
    t.equal(other.status, 200, "another key's GET on the same service answers")
    t.ok(ms < 2000, `promptly (${ms} ms), while 26 slow requests are open`)
    t.same(
      arrivals.filter((arrival) => arrival.startsWith('POST')),
      [],
      'no slow request reached the service',
    )

    const answers = await Promise.all(slow.map((s) => s.answer))
    t.same(
      answers.map((answer) => answer.status),
      Array(26).fill(408),
      'each slow request gets 408',
    )
    const slowest = Math.max(...answers.map((answer) => answer.ms))
    t.ok(slowest < requestTimeoutMs + 1000, `within the request timeout (the last after ${slowest} ms)`)
    t.same(JSON.parse(answers[0]!.body), { error: 'request timeout: the request, headers and body, did not arrive in time' })
    t.same(
      arrivals.filter((arrival) => arrival.startsWith('POST')),
      [],
      'still none reached the service',
    )
    t.equal((await request('/automations', as(slowKey, '203.0.113.40'))).status, 200, 'their slots are free again')
  })
})
