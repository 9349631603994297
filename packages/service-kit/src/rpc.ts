import { identityHeaders, isTier, type Endpoint, type Identity, type Topic } from '@ats/contracts'
import { headers as natsHeaders, ServiceErrorCodeHeader, ServiceErrorHeader, type Msg, type MsgHdrs, type NatsConnection, type Service, type ServiceMsg } from 'nats'
import { forwardedErrorStatus, isForwardedStatus } from './errors.ts'
import type { Logger } from './logger.ts'

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

/** An endpoint's answer was an error, a timeout or no answer: `statusCode` is what an HTTP caller answers. */
export class ServiceCallError extends Error {
  override name = 'ServiceCallError'
  readonly code = 'ATS_ERR_SERVICE_CALL'
  constructor(
    readonly subject: string,
    readonly statusCode: number,
    message: string,
  ) {
    super(message)
  }
}

/** Registers a service with the NATS services API: discoverable, with stats, queue-grouped by name. */
export function addNatsService(nc: NatsConnection, name: string, version: string, description: string): Promise<Service> {
  return nc.services.add({ name, version, description, queue: name })
}

function contextOf(h: MsgHdrs | undefined): CallContext {
  const get = (name: string) => h?.get(name) || undefined
  const identity: Identity = {}
  const ownerId = get(identityHeaders.ownerId)
  const keyId = get(identityHeaders.keyId)
  const tier = get(identityHeaders.tier)
  const wallet = get(identityHeaders.wallet)
  if (ownerId) identity.ownerId = ownerId
  if (keyId) identity.keyId = keyId
  if (wallet) identity.wallet = wallet
  if (isTier(tier)) identity.tier = tier
  const requestId = get(identityHeaders.requestId)
  return { identity, ...(requestId ? { requestId } : {}) }
}

function headersOf(context: CallContext): MsgHdrs | undefined {
  const { requestId, identity = {} } = context
  if (!requestId && !identity.ownerId && !identity.keyId && !identity.tier && !identity.wallet) return undefined
  const h = natsHeaders()
  if (requestId) h.set(identityHeaders.requestId, requestId)
  if (identity.ownerId) h.set(identityHeaders.ownerId, identity.ownerId)
  if (identity.keyId) h.set(identityHeaders.keyId, identity.keyId)
  if (identity.tier) h.set(identityHeaders.tier, identity.tier)
  if (identity.wallet) h.set(identityHeaders.wallet, identity.wallet)
  return h
}

/**
 * Serves one request/reply endpoint. An undecodable request answers 400; a registry error
 * with a 4xx, 503 or 504 status answers that status and message; anything else answers 500
 * (logged, without detail).
 */
export function serveEndpoint<Req, Rep>(
  service: Service,
  name: string,
  endpoint: Endpoint<Req, Rep>,
  log: Logger,
  handler: (request: Req, context: Required<Pick<CallContext, 'identity'>> & CallContext) => Promise<Rep>,
): void {
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
      handler(request, context)
        .then((reply) => endpoint.reply.encode(reply))
        .then(
          (encoded) => msg.respond(encoded),
          (handlerError) => {
            const status = forwardedErrorStatus(handlerError)
            if (status) return msg.respondError(status, (handlerError as Error).message)
            log.error({ err: handlerError, endpoint: name, requestId: context.requestId }, 'endpoint handler failed')
            msg.respondError(500, 'internal error')
          },
        )
    },
  })
}

/** The service an endpoint belongs to, for messages: `<ns>.admin.keys.verify` -> admin. */
const serviceOf = (subject: string) => subject.split('.')[1] ?? subject

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
  const service = serviceOf(endpoint.subject)
  const h = headersOf(context)
  let msg: Msg
  try {
    msg = await nc.request(endpoint.subject, endpoint.request.encode(request), { timeout: timeoutMs, ...(h ? { headers: h } : {}) })
  } catch (error) {
    const code = (error as { code?: string }).code
    if (code === '503') throw new ServiceCallError(endpoint.subject, 503, `${service} service unavailable`)
    if (code === 'TIMEOUT') throw new ServiceCallError(endpoint.subject, 504, `${service} service did not answer within ${timeoutMs} ms`)
    throw new ServiceCallError(endpoint.subject, 503, `${service} service unreachable: ${(error as Error).message}`)
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
  nc.publish(topic.subject, topic.message.encode(message))
}

/** Subscribes to a broadcast; undecodable messages are logged and dropped. */
export function subscribe<M>(nc: NatsConnection, topic: Topic<M>, log: Logger, handler: (message: M) => void): () => void {
  const sub = nc.subscribe(topic.subject, {
    callback: (error, msg) => {
      if (error) return log.error({ err: error, subject: topic.subject }, 'subscription failed')
      try {
        handler(topic.message.decode(msg.data))
      } catch (decodeError) {
        log.warn({ err: decodeError, subject: topic.subject }, 'dropped an invalid message')
      }
    },
  })
  return () => sub.unsubscribe()
}
