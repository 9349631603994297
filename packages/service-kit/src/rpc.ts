import { identityHeaders, type Endpoint, type Identity, type Topic } from '@ats/contracts'
import {
  headers as natsHeaders,
  ServiceErrorCodeHeader,
  ServiceErrorHeader,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Service,
  type ServiceMsg,
} from 'nats'
import { ServiceCallError, databaseUnavailableMessage, forwardedErrorStatus, isDatabaseUnavailable, isForwardedStatus } from './errors.ts'
import { identityOf } from './identity.ts'
import type { Logger } from './logger.ts'
import { SpanKind, SpanStatusCode, contextOfHeaders, inSpan, injectNats, startSpan, traceContext, tracingEnabled } from './tracing.ts'

/**
 * Request/reply between services over the NATS services API. A handler's client errors
 * (400, 404, 409 …) travel as ADR-32 error headers and arrive at the caller as the same
 * status; the request id and the caller's identity travel as headers too.
 */

/** Who is asking, carried from the HTTP request that led to this call. */
export interface CallContext {
  requestId?: string
  identity?: Identity
}

/** The services each connection serves, and each service's handlers still running: what a stop waits for. */
const servicesOf = new WeakMap<NatsConnection, Service[]>()
const runningOf = new WeakMap<Service, Set<Promise<unknown>>>()

/** Registers a service with the NATS services API: discoverable, with stats, queue-grouped by name. */
export async function addNatsService(nc: NatsConnection, name: string, version: string, description: string): Promise<Service> {
  const service = await nc.services.add({ name, version, description, queue: name })
  servicesOf.set(nc, [...(servicesOf.get(nc) ?? []), service])
  runningOf.set(service, new Set())
  return service
}

/**
 * Stops serving on a connection, for a graceful shutdown: every service's subscriptions are
 * drained (the queue group's other members take new requests) and the handlers already running
 * are awaited, up to `timeoutMs`, so their replies are sent before the connection closes.
 * Resolves with the number of handlers still running at the timeout.
 */
export async function stopServing(nc: NatsConnection, timeoutMs: number): Promise<number> {
  const services = servicesOf.get(nc) ?? []
  await Promise.all(services.map((service) => service.stop()))
  const running = services.flatMap((service) => [...(runningOf.get(service) ?? [])])
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))
  await Promise.race([Promise.allSettled(running), timeout]).finally(() => clearTimeout(timer))
  return services.reduce((left, service) => left + (runningOf.get(service)?.size ?? 0), 0)
}

function contextOf(h: MsgHdrs | undefined): CallContext {
  const get = (name: string) => h?.get(name) || undefined
  const requestId = get(identityHeaders.requestId)
  return { identity: identityOf(get), ...(requestId ? { requestId } : {}) }
}

function headersOf({ requestId, identity = {} }: CallContext): MsgHdrs | undefined {
  const fields = (['ownerId', 'keyId', 'tier', 'wallet'] as const).map((field) => [identityHeaders[field], identity[field]] as const)
  const values = [[identityHeaders.requestId, requestId] as const, ...fields].filter(([, value]) => value)
  if (values.length === 0) return undefined
  const h = natsHeaders()
  for (const [name, value] of values) h.set(name, value!)
  return h
}

/**
 * Serves one request/reply endpoint, named after its subject (past the service, dots as dashes:
 * `<ns>.admin.keys.verify` is keys-verify, in the services API, logs and spans). An undecodable
 * request answers 400; a registry error with a 4xx, 503 or 504 status answers that status and
 * message; anything else answers 500 (logged, without detail).
 */
export function serveEndpoint<Req, Rep>(
  service: Service,
  endpoint: Endpoint<Req, Rep>,
  log: Logger,
  handler: (request: Req, context: Required<Pick<CallContext, 'identity'>> & CallContext) => Promise<Rep>,
): void {
  const name = endpoint.subject.split('.').slice(2).join('-')
  // once here: info() builds the service's whole description, endpoints and all
  const serviceName = service.info().name
  service.addEndpoint(name, {
    subject: endpoint.subject,
    handler: (error, msg: ServiceMsg) => {
      if (error) {
        log.error({ err: error, endpoint: name }, 'endpoint subscription failed')
        return
      }
      let request: Req
      try {
        request = endpoint.request.decode(msg.data)
      } catch (decodeError) {
        msg.respondError(400, (decodeError as Error).message)
        return
      }
      const context = contextOf(msg.headers) as Required<Pick<CallContext, 'identity'>> & CallContext
      // the reply is encoded (and checked) inside the chain: a reply that breaks its schema is a 500, not a crash
      const run = () =>
        handler(request, context)
          .then((reply) => endpoint.reply.encode(reply))
          .then(
            (encoded) => {
              msg.respond(encoded)
              return 200
            },
            (handlerError) => {
              const status = forwardedErrorStatus(handlerError)
              if (status) {
                msg.respondError(status, (handlerError as Error).message)
                return status
              }
              // Postgres restarting or failing over: the caller may retry
              if (isDatabaseUnavailable(handlerError)) {
                log.warn({ endpoint: name, requestId: context.requestId }, databaseUnavailableMessage)
                msg.respondError(503, databaseUnavailableMessage)
                return 503
              }
              log.error({ err: handlerError, endpoint: name, requestId: context.requestId }, 'endpoint handler failed')
              msg.respondError(500, 'internal error')
              return 500
            },
          )
      const running = runningOf.get(service)
      const track = (work: Promise<number>) => {
        running?.add(work)
        void work.finally(() => running?.delete(work))
        return work
      }
      if (!tracingEnabled()) return void track(run())
      // a server span, child of the caller's (its traceparent header)
      const { span, ctx } = startSpan(`serve ${endpoint.subject}`, {
        kind: SpanKind.SERVER,
        parent: contextOfHeaders(msg.headers),
        attributes: {
          'messaging.system': 'nats',
          'messaging.destination.name': endpoint.subject,
          'messaging.operation.type': 'process',
          'ats.service': serviceName,
          'ats.endpoint': name,
          ...(context.requestId ? { 'ats.request_id': context.requestId } : {}),
        },
      })
      void track(traceContext.with(ctx, run)).then((status) => {
        span.setAttribute('ats.status', status)
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
        span.end()
      })
    },
  })
}

/**
 * Calls an endpoint. A handler's 4xx, 503 and 504 reject with that status and message; its other 5xx with 502;
 * no responder with 503; no answer within the timeout with 504. Each is a ServiceCallError the
 * kit's error handler answers as `{error}` with that status.
 */
export async function callEndpoint<Req, Rep>(
  nc: NatsConnection,
  endpoint: Endpoint<Req, Rep>,
  request: Req,
  { timeoutMs = 2000, ...context }: CallContext & { timeoutMs?: number } = {},
): Promise<Rep> {
  if (!tracingEnabled()) return call(nc, endpoint, request, timeoutMs, headersOf(context))
  // a client span, whose context travels in the `traceparent` header
  return inSpan(
    `request ${endpoint.subject}`,
    {
      kind: SpanKind.CLIENT,
      attributes: { 'messaging.system': 'nats', 'messaging.destination.name': endpoint.subject, 'messaging.operation.type': 'send' },
    },
    () => call(nc, endpoint, request, timeoutMs, injectNats(headersOf(context))),
  )
}

/**
 * How long a call asks again after "no responders": at most half its timeout, 1.5 s at most.
 * Nobody got such a request, so sending it again is safe; and when a NATS server of a cluster
 * dies, the services connected to it are without subscriptions for the moment they take to
 * reconnect to another, while their replicas may be on the same server (`pnpm rehearse` saw a
 * job fail so). A service really down still answers 503, only that much later.
 */
const noResponderRetryMs = (timeoutMs: number) => Math.min(timeoutMs / 2, 1500)

async function call<Req, Rep>(
  nc: NatsConnection,
  endpoint: Endpoint<Req, Rep>,
  request: Req,
  timeoutMs: number,
  h: MsgHdrs | undefined,
): Promise<Rep> {
  // the service it belongs to, for messages: `<ns>.admin.keys.verify` -> admin
  const service = endpoint.subject.split('.')[1] ?? endpoint.subject
  const started = Date.now()
  const retryUntil = started + noResponderRetryMs(timeoutMs)
  // encoded once, in the try as before: a request its schema refuses is answered like a failed call
  let data: Uint8Array | undefined
  let msg: Msg
  for (let wait = 50; ; wait = Math.min(wait * 2, 400)) {
    try {
      const timeout = Math.max(1, timeoutMs - (Date.now() - started))
      data ??= endpoint.request.encode(request)
      msg = await nc.request(endpoint.subject, data, { timeout, ...(h ? { headers: h } : {}) })
      break
    } catch (error) {
      const code = (error as { code?: string }).code
      if (code === '503' && Date.now() + wait < retryUntil) {
        await new Promise((resolve) => setTimeout(resolve, wait))
        continue
      }
      if (code === '503') throw new ServiceCallError(endpoint.subject, 503, `${service} service unavailable`)
      if (code === 'TIMEOUT') throw new ServiceCallError(endpoint.subject, 504, `${service} service did not answer within ${timeoutMs} ms`)
      throw new ServiceCallError(endpoint.subject, 503, `${service} service unreachable: ${(error as Error).message}`)
    }
  }
  const code = msg.headers?.get(ServiceErrorCodeHeader)
  if (code) {
    const status = Number(code)
    const description = msg.headers?.get(ServiceErrorHeader) ?? ''
    if (isForwardedStatus(status)) throw new ServiceCallError(endpoint.subject, status, description)
    throw new ServiceCallError(endpoint.subject, 502, `${service} service failed`)
  }
  return endpoint.reply.decode(msg.data)
}

export function publish<M>(nc: NatsConnection, topic: Topic<M>, message: M): void {
  // with tracing on, the publisher's trace travels along (subscribers' log lines carry it)
  nc.publish(topic.subject, topic.message.encode(message), tracingEnabled() ? { headers: injectNats(undefined) } : undefined)
}

/** Subscribes to a broadcast; undecodable messages are logged and dropped. */
export function subscribe<M>(nc: NatsConnection, topic: Topic<M>, log: Logger, handler: (message: M) => void): () => void {
  const sub = nc.subscribe(topic.subject, {
    callback: (error, msg) => {
      if (error) return log.error({ err: error, subject: topic.subject }, 'subscription failed')
      try {
        if (tracingEnabled()) traceContext.with(contextOfHeaders(msg.headers), handler, undefined, topic.message.decode(msg.data))
        else handler(topic.message.decode(msg.data))
      } catch (decodeError) {
        log.warn({ err: decodeError, subject: topic.subject }, 'dropped an invalid message')
      }
    },
  })
  return () => sub.unsubscribe()
}
