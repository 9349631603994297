import type { Endpoint, Topic } from '@ats/contracts'
import { ServiceErrorCodeHeader, ServiceErrorHeader, type NatsConnection, type Service, type ServiceMsg } from 'nats'
import type { FastifyBaseLogger } from 'fastify'

/** Registers a service with the NATS services API: discoverable, with stats, queue-grouped by name. */
export function addNatsService(nc: NatsConnection, name: string, version: string, description: string): Promise<Service> {
  return nc.services.add({ name, version, description, queue: name })
}

/**
 * Serves one request/reply endpoint. Bad requests answer a 400 service error,
 * handler failures a 500 (logged); both travel as headers per ADR-32.
 */
export function serveEndpoint<Req, Rep>(
  service: Service,
  name: string,
  endpoint: Endpoint<Req, Rep>,
  log: FastifyBaseLogger,
  handler: (request: Req) => Promise<Rep>,
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
      handler(request).then(
        (reply) => msg.respond(endpoint.reply.encode(reply)),
        (handlerError) => {
          log.error({ err: handlerError, endpoint: name }, 'endpoint handler failed')
          msg.respondError(500, 'internal error')
        },
      )
    },
  })
}

/** An endpoint answered with a service error (ADR-32 headers). */
export class ServiceCallError extends Error {
  override name = 'ServiceCallError'
  constructor(
    readonly subject: string,
    readonly code: number,
    description: string,
  ) {
    super(`${subject} answered ${code}: ${description}`)
  }
}

/** Calls an endpoint; a service error or a timeout rejects. */
export async function callEndpoint<Req, Rep>(
  nc: NatsConnection,
  endpoint: Endpoint<Req, Rep>,
  request: Req,
  timeoutMs = 2000,
): Promise<Rep> {
  const msg = await nc.request(endpoint.subject, endpoint.request.encode(request), { timeout: timeoutMs })
  const code = msg.headers?.get(ServiceErrorCodeHeader)
  if (code) throw new ServiceCallError(endpoint.subject, Number(code), msg.headers?.get(ServiceErrorHeader) ?? '')
  return endpoint.reply.decode(msg.data)
}

export function publish<M>(nc: NatsConnection, topic: Topic<M>, message: M): void {
  nc.publish(topic.subject, topic.message.encode(message))
}

/** Subscribes to a broadcast; undecodable messages are logged and dropped. */
export function subscribe<M>(nc: NatsConnection, topic: Topic<M>, log: FastifyBaseLogger, handler: (message: M) => void): () => void {
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
