// Tracing across the fleet: one paid prompt is ONE trace, from the gateway's request span through
// the agent's API, the worker that runs the job, to market-data answering its price lookup.
// The fleet runs in this process (fleet.ts), so the spans are collected in memory.
import { SpanKind } from '@ats/service-kit'
import { startTestTracing } from '@ats/service-kit/testing'
import t from 'tap'
import { eventually, startAgentFleet } from './fleet.ts'

// before the fleet is built: its services see tracing on
const exporter = await startTestTracing()
const fleet = await startAgentFleet(t)
type ReadableSpan = ReturnType<typeof exporter.getFinishedSpans>[number]

const idOf = (span: ReadableSpan) => span.spanContext().spanId
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId
const kinds = ['internal', 'server', 'client', 'producer', 'consumer']
const ms = (span: ReadableSpan) => Math.round((span.duration[0] * 1e3 + span.duration[1] / 1e6) * 10) / 10

/** The trace as indented text: one span a line, children under their parent, in start order. */
function render(spans: ReadableSpan[]): string {
  const byParent = new Map<string | undefined, ReadableSpan[]>()
  for (const span of spans) byParent.set(parentOf(span), [...(byParent.get(parentOf(span)) ?? []), span])
  const start = (s: ReadableSpan) => s.startTime[0] * 1e9 + s.startTime[1]
  const lines: string[] = []
  const walk = (parent: string | undefined, depth: number) => {
    for (const span of (byParent.get(parent) ?? []).sort((a, b) => start(a) - start(b))) {
      const service = span.attributes['ats.service'] ? ` [${span.attributes['ats.service']}]` : ''
      lines.push(`${'  '.repeat(depth)}${span.name} (${kinds[span.kind]}${service}, ${ms(span)} ms)`)
      walk(idOf(span), depth + 1)
    }
  }
  walk(undefined, 0)
  return lines.join('\n')
}

t.test('a paid prompt is one trace: gateway → agent API → worker → market-data', async (t) => {
  const accepted = await fleet.request('/agent/prompt', {
    method: 'POST',
    body: { prompt: 'What is the price of ARB?' },
    headers: { 'x-payment': await fleet.pay() },
  })
  t.equal(accepted.status, 202, JSON.stringify(accepted.body))
  const jobId = accepted.body.jobId as string
  await eventually(
    'the job done',
    async () => {
      const job = await fleet.request(`/agent/job/${jobId}`, { headers: { 'x-payment': await fleet.pay() } })
      return ['complete', 'failed'].includes(job.body.status) ? job.body : undefined
    },
    60_000,
  )

  const all = () => exporter.getFinishedSpans()
  const gateway = all().find((s) => s.attributes['ats.service'] === 'gateway' && s.attributes['url.path'] === '/agent/prompt')
  t.ok(gateway, "the gateway's span of the prompt request")
  const traceId = gateway!.spanContext().traceId
  t.equal(parentOf(gateway!), undefined, 'it is the root')
  t.equal(gateway!.kind, SpanKind.SERVER)
  t.match(gateway!.attributes, { 'http.request.method': 'POST', 'http.response.status_code': 202 })

  const isMarket = (s: ReadableSpan) => s.kind === SpanKind.SERVER && /market/.test(String(s.attributes['ats.service']))
  // the worker's spans end after the job's status is written: wait for market-data's
  const trace = await eventually('the spans of the whole trace', async () => {
    const spans = all().filter((s) => s.spanContext().traceId === traceId)
    return spans.some(isMarket) ? spans : undefined
  })
  const byId = new Map(trace.map((s) => [idOf(s), s]))
  /** the span's ancestors, nearest first; every one must be in the trace */
  const ancestors = (span: ReadableSpan) => {
    const chain: ReadableSpan[] = []
    for (let parent = parentOf(span); parent; parent = parentOf(byId.get(parent)!)) {
      const found = byId.get(parent)
      if (!found) throw new Error(`span ${span.name} has a parent ${parent} outside the trace`)
      chain.push(found)
    }
    return chain
  }

  const agent = trace.find(
    (s) => s.kind === SpanKind.SERVER && s.attributes['ats.service'] === 'agent' && s.attributes['url.path'] === '/agent/prompt',
  )
  t.ok(agent, "the agent API's span of the prompt")
  t.equal(parentOf(agent!), idOf(gateway!), "a child of the gateway's: the proxied request carried traceparent")

  const enqueue = trace.find((s) => s.kind === SpanKind.PRODUCER && /\.agent\.jobs?\b/.test(s.name))
  t.ok(enqueue, 'the job enqueued (JetStream publish)')
  t.ok(ancestors(enqueue!).includes(agent!), 'under the agent API request')

  const worker = trace.find((s) => s.kind === SpanKind.CONSUMER && s.name === enqueue!.name.replace(/^publish /, 'process '))
  t.ok(worker, 'the worker runs the job in the same trace')
  t.equal(parentOf(worker!), idOf(enqueue!), 'a child of the publish: the job message carried traceparent')
  t.equal(worker!.attributes['ats.outcome'], 'done')

  const market = trace.filter(isMarket)
  t.ok(market.length > 0, 'market-data answers in the same trace')
  for (const span of market) {
    const chain = ancestors(span)
    t.ok(chain.includes(worker!), `${span.name} is under the worker`)
    t.equal(chain.at(-1), gateway, '…and under the gateway')
    const call = byId.get(parentOf(span)!)!
    t.equal(call.kind, SpanKind.CLIENT, 'its parent is the NATS request the worker made')
  }

  // every span of the trace hangs from the gateway's
  for (const span of trace) if (span !== gateway) t.equal(ancestors(span).at(-1), gateway, `${span.name} is under the root`)
  t.ok(
    trace.some((s) => s.name.startsWith('db.')),
    'database calls are spans too',
  )
  t.comment(`one trace, ${trace.length} spans (${traceId}):\n${render(trace)}`)
})
