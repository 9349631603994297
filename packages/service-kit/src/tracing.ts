// OpenTelemetry tracing for the fleet: off (the API's no-ops, no SDK loaded) unless an OTLP endpoint is set.
import { firstLine } from './errors.ts'
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  propagation,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api'
import type { TracerProvider } from '@opentelemetry/api'
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import { headers as natsHeaders, type MsgHdrs } from 'nats'

export interface TracingConfig {
  OTEL_EXPORTER_OTLP_ENDPOINT?: string | undefined
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?: string | undefined
}

/**
 * Whether a tracer provider was registered by the kit. Every hot path asks this first and
 * does nothing more when it is false: no span objects, no header objects, no id formatting.
 */
let enabled = false
let provider: { forceFlush(): Promise<void>; shutdown(): Promise<void> } | undefined

export const tracingEnabled = (): boolean => enabled

const tracer = () => trace.getTracer('@ats/service-kit')

/** Where spans are posted, from the settings; undefined: tracing stays off. */
export function tracesUrl(config: TracingConfig): string | undefined {
  if (config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  if (config.OTEL_EXPORTER_OTLP_ENDPOINT) return `${config.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, '')}/v1/traces`
  return undefined
}

/**
 * Registers the Node SDK with an OTLP/HTTP exporter, once per process, when an endpoint is set.
 * The SDK is imported only then: a fleet without tracing loads none of it. The first service a
 * process starts names its resource (`service.name`); one process runs one service outside tests.
 */
export async function startTracing(serviceName: string, version: string, config: TracingConfig): Promise<void> {
  const url = tracesUrl(config)
  if (!url || enabled) return
  const [
    { NodeSDK },
    { OTLPTraceExporter },
    { BatchSpanProcessor },
    { W3CTraceContextPropagator },
    { defaultResource, resourceFromAttributes },
  ] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
  ])
  if (enabled) return
  // batch delay and sizes from OTEL_BSP_* when set
  const processor = new BatchSpanProcessor(new OTLPTraceExporter({ url }))
  const sdk = new NodeSDK({
    serviceName,
    resource: defaultResource().merge(resourceFromAttributes({ 'service.version': version })),
    spanProcessors: [processor],
    textMapPropagator: new W3CTraceContextPropagator(),
    instrumentations: [],
    // traces only: metrics stay on /metrics (Prometheus), logs on stdout
    metricReaders: [],
    logRecordProcessors: [],
  })
  sdk.start()
  provider = { forceFlush: () => processor.forceFlush(), shutdown: () => sdk.shutdown() }
  enabled = true
}

/** For tests: a provider registered by hand (an in-memory exporter) counts as tracing on. */
export function useTracerProvider(registered: TracerProvider & { forceFlush(): Promise<void>; shutdown(): Promise<void> }): void {
  provider = registered
  enabled = true
}

/** Sends the spans that wait in the batch; a stopping service calls it so its last spans are not lost. */
export async function flushTraces(): Promise<void> {
  await provider?.forceFlush().catch(() => {})
}

/** The active span's trace id, for log lines; undefined outside a span or with tracing off. */
export function activeTraceId(): string | undefined {
  return trace.getSpan(context.active())?.spanContext().traceId
}

const natsGetter: TextMapGetter<MsgHdrs | undefined> = {
  keys: (h) => (h ? [...h.keys()] : []),
  get: (h, key) => h?.get(key) || undefined,
}
const natsSetter: TextMapSetter<MsgHdrs> = { set: (h, key, value) => h.set(key, value) }

/** The trace a NATS message carries (its `traceparent` header), or the root. */
export function contextOfHeaders(h: MsgHdrs | undefined): Context {
  return h ? propagation.extract(ROOT_CONTEXT, h, natsGetter) : ROOT_CONTEXT
}

/** Writes `traceparent` for `ctx` into NATS headers, made when there are none. Call only with tracing on. */
export function injectNats(h: MsgHdrs | undefined, ctx: Context = context.active()): MsgHdrs {
  const out = h ?? natsHeaders()
  propagation.inject(ctx, out, natsSetter)
  return out
}

/** Writes `traceparent` for `ctx` into plain HTTP request headers. */
export function injectHttp(headers: Record<string, unknown>, ctx: Context = context.active()): void {
  propagation.inject(ctx, headers)
}

export interface SpanSpec {
  kind?: SpanKind
  attributes?: Attributes
  links?: Link[]
  /** the parent (the active context by default) */
  parent?: Context
}

/**
 * Where the span of work done for several traces at once sits (a batch of messages, charges
 * published together): one trace, continued as its child; several, a span under
 * `batchParent` linked to each (a span has one parent, and a batch serves them all).
 */
export function batchSpanSpec(traces: Array<Context | undefined>, batchParent: Context): Pick<SpanSpec, 'parent' | 'links'> {
  if (traces.length === 1 && traces[0]) return { parent: traces[0] }
  const links = traces.flatMap((t) => {
    const linked = t && trace.getSpanContext(t)
    return linked ? [{ context: linked }] : []
  })
  return links.length > 0 ? { parent: batchParent, links } : { parent: batchParent }
}

/** Marks a span failed with the error's first line (messages never carry secrets in this code base: see errors.ts). */
export function failSpan(span: Span, error: unknown): void {
  const message = firstLine(error)
  span.setStatus({ code: SpanStatusCode.ERROR, ...(message ? { message } : {}) })
  const status = (error as { statusCode?: unknown }).statusCode
  if (typeof status === 'number') span.setAttribute('ats.error.status', status)
  if (error instanceof Error) span.setAttribute('error.type', (error as { code?: string }).code ?? error.name)
}

/** Starts a span (not made active). Call only with tracing on. */
export function startSpan(name: string, spec: SpanSpec = {}): { span: Span; ctx: Context } {
  const parent = spec.parent ?? context.active()
  const span = tracer().startSpan(
    name,
    {
      kind: spec.kind ?? SpanKind.INTERNAL,
      ...(spec.attributes ? { attributes: spec.attributes } : {}),
      ...(spec.links ? { links: spec.links } : {}),
    },
    parent,
  )
  return { span, ctx: trace.setSpan(parent, span) }
}

/**
 * Runs `fn` inside a new span, ended when it settles, failed when it throws. With tracing off
 * it only calls `fn`: callers may use it on hot paths, but should not build `spec` for nothing
 * (check `tracingEnabled()` first where the attributes cost something to make).
 */
export async function inSpan<T>(name: string, spec: SpanSpec | (() => SpanSpec), fn: (span: Span | undefined) => Promise<T>): Promise<T> {
  if (!enabled) return fn(undefined)
  const { span, ctx } = startSpan(name, typeof spec === 'function' ? spec() : spec)
  try {
    return await context.with(ctx, () => fn(span))
  } catch (error) {
    failSpan(span, error)
    throw error
  } finally {
    span.end()
  }
}

export { ROOT_CONTEXT, SpanKind, SpanStatusCode, context as traceContext, trace, type Context, type Span }

/** Each request's trace context (its server span), while tracing is on. */
const requestContexts = new WeakMap<object, Context>()

/** The trace context of an HTTP request (its server span); undefined with tracing off. */
export const requestTraceContext = (request: object): Context | undefined => (enabled ? requestContexts.get(request) : undefined)

/**
 * A server span per HTTP request, installed by createService only when tracing is on. It is the
 * active span from `onRequest` on: each later stage runs inside it (a request body is read
 * outside any context, so `preValidation` and `preHandler` enter it again), so the handler's
 * NATS calls, queries and log lines belong to it. Services continue the `traceparent` the
 * gateway sent; the gateway (`edge`) starts every trace itself: a client's traceparent would let
 * it choose trace ids and join other traces.
 */
export function installRequestTracing(app: FastifyInstance, service: string, edge: boolean): void {
  app.addHook('onRequest', (request, _reply, done) => {
    const route = request.routeOptions.url
    const parent = edge ? ROOT_CONTEXT : propagation.extract(ROOT_CONTEXT, request.headers)
    const { ctx } = startSpan(`${request.method} ${route ?? 'unmatched route'}`, {
      kind: SpanKind.SERVER,
      parent,
      attributes: {
        'http.request.method': request.method,
        ...(route ? { 'http.route': route } : {}),
        'url.path': request.url.split('?', 1)[0]!,
        'ats.service': service,
        'ats.request_id': request.id,
      },
    })
    requestContexts.set(request, ctx)
    context.with(ctx, done)
  })
  const enter = (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) => {
    const ctx = requestContexts.get(request)
    if (ctx) context.with(ctx, done)
    else done()
  }
  app.addHook('preValidation', enter)
  app.addHook('preHandler', enter)
  // ends the span, and runs the kit's request log line (the next onResponse hook) inside it
  app.addHook('onResponse', (request, reply, done) => {
    const ctx = requestContexts.get(request)
    const span = ctx && trace.getSpan(ctx)
    if (!ctx || !span) return done()
    span.setAttribute('http.response.status_code', reply.statusCode)
    if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
    span.end()
    context.with(ctx, done)
  })
}
