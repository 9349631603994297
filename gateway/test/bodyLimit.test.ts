import { request as httpRequest } from 'node:http'
import { startTestDevnet } from '@ats/devnet'
import { baseTestEnv, startService } from '@ats/service-kit/testing'
import type { ServiceDefinition, TypeBoxTypeProvider } from '@ats/service-kit'
import t from 'tap'
import { Type } from 'typebox'
import { gatewayService } from '../src/service.ts'

/**
 * The gateway's body limit, over sockets (Expect: 100-continue and chunked bodies need them): a
 * gateway whose /agent routes pass without payment (SKIP_PAYMENT on the devnet) in front of a kit
 * service that counts what reaches it. The gateway's limit is 4096 bytes, the service's 2048.
 */
const received: number[] = []
const upstream: ServiceDefinition<{}, never> = {
  name: 'upstream',
  version: '1.0.0',
  port: 0,
  async register(app) {
    const api = app.withTypeProvider<TypeBoxTypeProvider>()
    api.post('/agent/echo', { schema: { body: Type.Object({ text: Type.String() }) } }, async (request) => {
      received.push(request.body.text.length)
      return { length: request.body.text.length }
    })
  },
}

const env = await baseTestEnv(t)
const { devnet, chainEnv } = await startTestDevnet(t)
const service = await startService(t, upstream, { ...env, BODY_LIMIT_BYTES: '65536' })
const gateway = await startService(t, gatewayService, {
  ...env,
  ...chainEnv,
  SKIP_PAYMENT: 'true',
  PAY_TO: devnet.accounts[9]!.address,
  AGENT_URL: service.url,
  BODY_LIMIT_BYTES: '1048576',
})

interface Sent {
  status: number
  body: any
  /** the server asked for the body (100 Continue) */
  continued: boolean
}

/** POST /agent/echo with a body of `{text}` `length` characters long, sent as the options say. */
function send(length: number, options: { expectContinue?: boolean; chunked?: boolean } = {}) {
  const body = Buffer.from(JSON.stringify({ text: 'x'.repeat(length) }))
  return new Promise<Sent>((resolve, reject) => {
    let continued = false
    const req = httpRequest(`${gateway.url}/agent/echo`, {
      method: 'POST',
      agent: false,
      headers: {
        'content-type': 'application/json',
        ...(options.chunked ? {} : { 'content-length': body.length }),
        ...(options.expectContinue ? { expect: '100-continue' } : {}),
      },
    })
    const write = () => {
      // a chunked body goes out in pieces, as a streaming client sends it
      if (options.chunked) for (let at = 0; at < body.length; at += 16_384) req.write(body.subarray(at, at + 16_384))
      else req.write(body)
      req.end()
    }
    req.on('continue', () => {
      continued = true
      write()
    })
    req.on('response', (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString()), continued }))
    })
    req.on('error', reject)
    if (!options.expectContinue) write()
  })
}

const tooLarge = { error: 'request body too large: the limit is 1048576 bytes' }

t.test('a body over the limit answers 413 naming it, every time, and never reaches the service', async (t) => {
  const before = received.length
  for (let i = 0; i < 5; i++) {
    const res = await send(2_000_000)
    t.equal(res.status, 413)
    t.same(res.body, tooLarge)
  }
  t.equal(received.length, before, 'the service saw none of them')
})

t.test('with Expect: 100-continue, a body over the limit gets 413 instead of 100; one within it gets 100 and goes through', async (t) => {
  const before = received.length
  const refused = await send(2_000_000, { expectContinue: true })
  t.equal(refused.status, 413)
  t.same(refused.body, tooLarge)
  t.notOk(refused.continued, 'no 100 Continue: the client never sends the body')
  t.equal(received.length, before)
  const fits = await send(1000, { expectContinue: true })
  t.ok(fits.continued, '100 Continue')
  t.equal(fits.status, 200)
  t.same(fits.body, { length: 1000 })
})

t.test('a chunked body is counted: over the limit 413, within it the service gets all of it', async (t) => {
  const before = received.length
  const refused = await send(2_000_000, { chunked: true })
  t.equal(refused.status, 413)
  t.same(refused.body, tooLarge)
  t.equal(received.length, before, 'no part of it reached the service')
  const fits = await send(1500, { chunked: true })
  t.equal(fits.status, 200)
  t.same(fits.body, { length: 1500 })
})

t.test("a service's own 4xx passes through as it answered, never as 503", async (t) => {
  const nul = await fetchJson('{"text":"a\\u0000b"}')
  t.equal(nul.status, 400)
  t.same(nul.body, { error: 'body/text must not contain control characters (found U+0000)' })
  // within the gateway's limit, over the service's own: the service's 413, five times out of five
  // (it used to close the connection while the proxy was still sending: a 503)
  for (let i = 0; i < 5; i++) {
    const res = await send(500_000)
    t.equal(res.status, 413, `try ${i + 1}`)
    t.same(res.body, { error: 'request body too large: the limit is 65536 bytes' })
  }
})

async function fetchJson(body: string) {
  const res = await fetch(`${gateway.url}/agent/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
  return { status: res.status, body: await res.json() }
}
