import { Writable } from 'node:stream'
import { identityHeaders } from '@ats/contracts'
import pino from 'pino'
import t, { type Test } from 'tap'
import { Type } from 'typebox'
import { Unavailable } from '../src/errors.ts'
import { loggerOptions } from '../src/logger.ts'
import type { ServiceDefinition } from '../src/service.ts'
import { startService, testInfra, testInternalToken } from '../src/testing.ts'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'

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
    api.post(
      '/items',
      { schema: { body: Type.Object({ name: Type.String({ maxLength: 3 }), kind: Type.Unsafe<string>({ type: 'string', enum: ['a', 'b'] }) }) } },
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
  log.info({ req: { headers: { authorization: 'Bearer atsk_secret', 'x-api-key': 'atsk_other', 'x-payment': 'sig', accept: 'json' } } }, 'in')
  t.notMatch(lines.join(''), /atsk_secret|atsk_other|"sig"/)
  t.match(lines.join(''), /"accept":"json"/)
})
