// Tracing, on (in memory): an HTTP request, the NATS requests it makes, a JetStream job it submits
// and the consumer that runs it are one trace, with the right parents; log lines carry its id.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { endpoint, identityHeaders, topic } from '@ats/contracts'
import { SpanKind } from '@opentelemetry/api'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { pino } from 'pino'
import t from 'tap'
import { Type } from 'typebox'
import {
  addNatsService,
  callEndpoint,
  ensureStream,
  publishTraced,
  serveEndpoint,
  startDurableConsumer,
  startWorkQueueConsumer,
  type ServiceDefinition,
} from '../src/index.ts'
import { createHttpClient } from '../src/http.ts'
import { loggerOptions } from '../src/logger.ts'
import { baseTestEnv, eventually, startService, startTestTracing, testInternalToken } from '../src/testing.ts'

// before any service is made: they see tracing on when built
const exporter = await startTestTracing()

const spans = () => exporter.getFinishedSpans()
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId
const idOf = (span: ReadableSpan) => span.spanContext().spanId
const traceOf = (span: ReadableSpan) => span.spanContext().traceId

/** Log lines as objects, written with the kit's logger options. */
function capturedLog() {
  const lines: Array<Record<string, unknown>> = []
  const log = pino(loggerOptions('traced', 'info'), { write: (line: string) => lines.push(JSON.parse(line)) })
  return { log, lines }
}

t.test('one request through HTTP, NATS and JetStream is one trace', async (t) => {
  const env = await baseTestEnv(t)
  const ns = env.NATS_NAMESPACE!
  const echo = endpoint(`${ns}.traced.echo`, Type.Object({ text: Type.String() }), Type.Object({ text: Type.String() }))
  const jobs = topic(`${ns}.traced.jobs`, Type.Object({ id: Type.String() }))
  const notes = topic(`${ns}.traced.notes`, Type.Object({ id: Type.String() }))
  const jobStream = {
    name: `${ns}_traced_jobs`,
    subjects: [jobs.subject],
    maxAgeMs: 60_000,
    duplicateWindowMs: 10_000,
    retention: 'workqueue' as const,
  }
  const noteStream = {
    name: `${ns}_traced_notes`,
    subjects: [notes.subject, `${ns}.traced.dead`],
    maxAgeMs: 60_000,
    duplicateWindowMs: 10_000,
  }
  const { log, lines } = capturedLog()

  const backend: ServiceDefinition<{}, never> = {
    name: 'traced-backend',
    version: '1.0.0',
    port: 0,
    register: async (_app, ctx) => {
      const service = await addNatsService(ctx.nc, 'traced-backend', '1.0.0', 'answers echo')
      serveEndpoint(service, echo, log, async ({ text }) => {
        log.info({ text }, 'echo handled')
        return { text }
      })
      ctx.onClose(async () => {
        await service.stop()
      })
    },
  }
  let ran!: () => void
  const jobRan = new Promise<void>((resolve) => (ran = resolve))
  let noted!: () => void
  const noteTaken = new Promise<void>((resolve) => (noted = resolve))
  const front: ServiceDefinition<{}, never> = {
    name: 'traced-front',
    version: '1.0.0',
    port: 0,
    edge: true,
    register: async (app, ctx) => {
      await ensureStream(ctx.nc, jobStream)
      await ensureStream(ctx.nc, noteStream)
      const js = ctx.nc.jetstream()
      const worker = await startWorkQueueConsumer({
        nc: ctx.nc,
        log,
        stream: jobStream,
        durable: 'traced-worker',
        topic: jobs,
        concurrency: 1,
        ackWaitMs: 5_000,
        maxDeliveries: 3,
        handle: async ({ message }) => {
          await callEndpoint(ctx.nc, echo, { text: `job ${message.id}` })
          log.info({ id: message.id }, 'job ran')
          ran()
          return 'done'
        },
        exhausted: async () => {},
      })
      const consumer = await startDurableConsumer({
        nc: ctx.nc,
        log,
        stream: noteStream,
        durable: 'traced-notes',
        topic: notes,
        deadLetterSubject: `${ns}.traced.dead`,
        handle: async () => {
          log.info('note taken')
          noted()
        },
      })
      ctx.onClose(() => worker.stop())
      ctx.onClose(() => consumer.stop())
      app.post('/go', async (request) => {
        request.log.info('going')
        const { text } = await callEndpoint(ctx.nc, echo, { text: 'hello' }, { requestId: request.id })
        await publishTraced(js, jobs.subject, jobs.message.encode({ id: 'j1' }), { msgID: 'j1' })
        await publishTraced(js, notes.subject, notes.message.encode({ id: 'n1' }), { msgID: 'n1' })
        return { text }
      })
    },
  }
  await startService(t, backend, env)
  const gateway = await startService(t, front, env)

  // a client's traceparent is not continued at the edge
  const clientTrace = '0af7651916cd43dd8448eb211c80319c'
  const res = await fetch(`${gateway.url}/go`, { method: 'POST', headers: { traceparent: `00-${clientTrace}-b7ad6b7169203331-01` } })
  t.same(await res.json(), { text: 'hello' })
  await jobRan
  await noteTaken

  const root = await eventually('the request span', async () => spans().find((s) => s.name === 'POST /go'))
  const trace = traceOf(root)
  t.not(trace, clientTrace, "the gateway starts its own trace, whatever the client's traceparent")
  t.equal(parentOf(root), undefined, 'the request span is the root')
  t.equal(root.kind, SpanKind.SERVER)
  t.match(root.attributes, {
    'http.request.method': 'POST',
    'http.route': '/go',
    'http.response.status_code': 200,
    'ats.service': 'traced-front',
  })

  const inTrace = await eventually('every span of the trace', async () => {
    const all = spans().filter((s) => traceOf(s) === trace)
    // root, 2 × (request + serve), 2 publishes, 2 consumers
    return all.length >= 9 ? all : undefined
  })
  const named = (name: string) => inTrace.filter((s) => s.name === name)
  const [call, callInJob] = named(`request ${echo.subject}`).sort(
    (a, b) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1],
  )
  const serves = named(`serve ${echo.subject}`)
  const [publishJob] = named(`publish ${jobs.subject}`)
  const [publishNote] = named(`publish ${notes.subject}`)
  const [runJob] = named(`process ${jobs.subject}`)
  const [takeNote] = named(`process ${notes.subject}`)
  t.ok(call && callInJob && publishJob && publishNote && runJob && takeNote, 'all the spans are there')
  t.equal(serves.length, 2)

  t.equal(parentOf(call!), idOf(root), 'the NATS request is a child of the HTTP request')
  t.equal(call!.kind, SpanKind.CLIENT)
  t.ok(
    serves.some((s) => parentOf(s) === idOf(call!)),
    'the endpoint serves it in a child span: the traceparent crossed NATS',
  )
  const serve = serves.find((s) => parentOf(s) === idOf(call!))!
  t.match(serve.attributes, {
    'messaging.system': 'nats',
    'messaging.destination.name': echo.subject,
    'ats.service': 'traced-backend',
    'ats.endpoint': 'echo',
    'ats.status': 200,
  })
  t.equal(serve.kind, SpanKind.SERVER)

  t.equal(parentOf(publishJob!), idOf(root), 'the JetStream publish is a child of the request')
  t.equal(publishJob!.kind, SpanKind.PRODUCER)
  t.match(publishJob!.attributes, { 'messaging.message.id': 'j1' })
  t.equal(parentOf(runJob!), idOf(publishJob!), 'the work-queue consumer continues the publisher')
  t.equal(runJob!.kind, SpanKind.CONSUMER)
  t.match(runJob!.attributes, { 'messaging.consumer.group.name': 'traced-worker', 'ats.outcome': 'done', 'ats.deliveries': 1 })
  t.equal(parentOf(callInJob!), idOf(runJob!), "the job's NATS request is a child of the consumer span")
  t.ok(
    serves.some((s) => parentOf(s) === idOf(callInJob!)),
    "and the endpoint's span a child of that",
  )
  t.equal(parentOf(takeNote!), idOf(publishNote!), 'the durable consumer continues the publisher (a batch of one)')

  // log lines written inside spans carry the trace id
  const logged = (msg: string) => lines.filter((l) => l.msg === msg)
  t.equal(logged('echo handled').length, 2)
  for (const line of [...logged('echo handled'), ...logged('job ran'), ...logged('note taken')])
    t.equal(line.trace_id, trace, `"${line.msg}" carries the trace id`)
})

t.test("a service continues the traceparent it is sent; its handler's log lines carry the trace id", async (t) => {
  const env = await baseTestEnv(t)
  const { log, lines } = capturedLog()
  const service = await startService(
    t,
    {
      name: 'traced-service',
      version: '1.0.0',
      port: 0,
      register: async (app) => {
        app.post('/work', { schema: { body: Type.Object({ n: Type.Integer() }) } }, async (request) => {
          // after the body was read: the span is active in the handler
          log.info({ reqId: request.id }, 'working')
          return { n: (request.body as { n: number }).n }
        })
      },
    } satisfies ServiceDefinition<{}, never>,
    env,
  )
  const parent = 'b7ad6b7169203331'
  const trace = '4bf92f3577b34da6a3ce929d0e0e4736'
  const res = await fetch(`${service.url}/work`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      traceparent: `00-${trace}-${parent}-01`,
      [identityHeaders.internalToken]: testInternalToken,
    },
    body: JSON.stringify({ n: 3 }),
  })
  t.equal(res.status, 200)
  const span = await eventually('the span', async () => spans().find((s) => s.name === 'POST /work'))
  t.equal(traceOf(span), trace, 'same trace')
  t.equal(parentOf(span), parent, 'child of the caller')
  t.equal(lines.find((l) => l.msg === 'working')?.trace_id, trace, 'the handler logs with the trace id')
})

t.test("an outbound call's span records the call's own path: a key in the base URL's path or the query never reaches it", async (t) => {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{"ok":true}')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const key = 'alchemy-key-5f2b9c'
  // as market data builds Alchemy's client: the key is a path segment of the base URL
  const http = createHttpClient({
    name: 'alchemy',
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/nft/v3/${key}`,
    timeoutMs: 2000,
  })
  t.teardown(() => http.close())
  t.same(await http.getJson('/getNFTsForOwner?owner=0xabc', { query: { apiKey: key } }), { ok: true })
  const span = await eventually('the client span', async () => spans().find((s) => s.name === 'GET alchemy'))
  t.equal(span.kind, SpanKind.CLIENT)
  t.match(span.attributes, {
    'http.request.method': 'GET',
    'server.address': '127.0.0.1',
    'url.path': '/getNFTsForOwner',
    'ats.upstream': 'alchemy',
  })
  t.notOk(JSON.stringify(span.attributes).includes(key), 'no attribute carries the key')
})
