// Tracing off by default (no SDK, no trace headers, no log mixin), and on with an OTLP endpoint:
// spans are posted to <endpoint>/v1/traces as OTLP/HTTP JSON, named by the service.
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { endpoint, topic } from '@ats/contracts'
import { trace } from '@opentelemetry/api'
import { connect } from 'nats'
import t from 'tap'
import { Type } from 'typebox'
import { callEndpoint, ensureStream, publishTraced, tracingEnabled, type ServiceDefinition } from '../src/index.ts'
import { startTracing, tracesUrl } from '../src/tracing.ts'
import { loggerOptions } from '../src/logger.ts'
import { baseTestEnv, eventually, startService, testInfra } from '../src/testing.ts'

const definition: ServiceDefinition<{}, never> = {
  name: 'exported-service',
  version: '1.2.3',
  port: 0,
  register: async (app) => {
    app.get('/hello', async () => ({ hello: true }))
  },
}

t.test('the traces URL: the traces endpoint as given, or the base endpoint with /v1/traces', async (t) => {
  t.equal(tracesUrl({}), undefined)
  t.equal(tracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }), 'http://collector:4318/v1/traces')
  t.equal(
    tracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:4318/x' }),
    'http://b:4318/x',
  )
})

t.test('without an endpoint nothing is registered and nothing is added to messages or log lines', async (t) => {
  const env = await baseTestEnv(t)
  await startService(t, definition, env)
  await startTracing('exported-service', '1.2.3', {})
  t.equal(tracingEnabled(), false, 'tracing off')
  t.equal(trace.getTracerProvider().getTracer('x').startSpan('s').isRecording(), false, 'the API is the no-op one')
  t.equal(loggerOptions('x', 'info').mixin, undefined, 'no log mixin')

  const nc = await connect({ servers: (await testInfra()).natsUrl })
  t.teardown(() => nc.close())
  const ns = env.NATS_NAMESPACE!
  const echo = endpoint(`${ns}.off.echo`, Type.Object({}), Type.Object({}))
  const sub = nc.subscribe(echo.subject, {
    max: 1,
    callback: (_error, msg) => msg.respond(echo.reply.encode({}), { headers: msg.headers }),
  })
  const seen = new Promise<boolean>((resolve) => {
    const spy = nc.subscribe(echo.subject, { max: 1, callback: (_error, msg) => resolve(msg.headers === undefined) })
    t.teardown(() => spy.unsubscribe())
  })
  await callEndpoint(nc, echo, {})
  t.equal(await seen, true, 'a NATS request without identity carries no headers at all')
  sub.unsubscribe()

  const notes = topic(`${ns}.off.notes`, Type.Object({}))
  const stream = { name: `${ns}_off_notes`, subjects: [notes.subject], maxAgeMs: 60_000, duplicateWindowMs: 10_000 }
  const jsm = await ensureStream(nc, stream)
  t.teardown(() => jsm.streams.delete(stream.name).catch(() => false))
  await publishTraced(nc.jetstream(), notes.subject, notes.message.encode({}))
  const stored = await jsm.streams.getMessage(stream.name, { last_by_subj: notes.subject })
  t.notOk(stored.header?.get('traceparent'), 'a JetStream publish carries no traceparent')
})

t.test('with an endpoint the SDK exports spans over OTLP/HTTP', async (t) => {
  const posted: Array<{ path: string; type: string | undefined; body: any }> = []
  const receiver = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    posted.push({ path: req.url ?? '', type: req.headers['content-type'], body: JSON.parse(Buffer.concat(chunks).toString()) })
    res.setHeader('content-type', 'application/json')
    res.end('{}')
  })
  receiver.listen(0, '127.0.0.1')
  await once(receiver, 'listening')
  t.teardown(() => {
    receiver.closeAllConnections()
    receiver.close()
  })
  const env = await baseTestEnv(t)
  const service = await startService(t, definition, {
    ...env,
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`,
  })
  t.equal(tracingEnabled(), true)
  const res = await fetch(`${service.url}/hello`, { headers: { 'x-ats-internal-token': env.INTERNAL_TOKEN! } })
  t.equal(res.status, 200)
  // closing flushes the batch
  await service.close()
  const post = await eventually('spans posted', async () => posted.find((p) => p.path === '/v1/traces'))
  t.match(post.type, /application\/json/)
  const [resourceSpans] = post.body.resourceSpans
  const attributes = Object.fromEntries(resourceSpans.resource.attributes.map((a: any) => [a.key, Object.values(a.value)[0]]))
  t.match(attributes, { 'service.name': 'exported-service', 'service.version': '1.2.3' })
  const names = resourceSpans.scopeSpans.flatMap((s: any) => s.spans.map((span: any) => span.name))
  t.ok(names.includes('GET /hello'), `the request's span is exported (${names.join(', ')})`)
})
