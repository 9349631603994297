// How long a client may take: without a request timeout, a body sent at a byte every few seconds
// keeps its request open for minutes (Node times out only headers, at 60 s; Fastify turns Node's
// request timeout off).
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import { StartupError, type ServiceConfig } from '@ats/service-kit'
import type { FastifyInstance, FastifyServerOptions } from 'fastify'
import type { gatewaySettings } from '../settings.ts'

/**
 * The Node server's timeouts as Fastify options: headers (SERVER_HEADERS_TIMEOUT_MS), the whole
 * request, headers and body (SERVER_REQUEST_TIMEOUT_MS; the answer's time is not counted), and
 * idle keep-alive connections (SERVER_KEEP_ALIVE_TIMEOUT_MS). Node looks for late requests every
 * `connectionsCheckingInterval` (30 s by default, which would let a 1 s limit run 30 s): here at
 * most a second, and a quarter of the shorter limit when that is less.
 */
export function serverTimeouts(config: ServiceConfig<typeof gatewaySettings>): Partial<FastifyServerOptions> {
  const headersTimeout = config.SERVER_HEADERS_TIMEOUT_MS
  const requestTimeout = config.SERVER_REQUEST_TIMEOUT_MS
  if (headersTimeout > requestTimeout) {
    throw new StartupError(
      `SERVER_HEADERS_TIMEOUT_MS (${headersTimeout}) must not exceed SERVER_REQUEST_TIMEOUT_MS (${requestTimeout}): the whole request includes its headers`,
    )
  }
  const connectionsCheckingInterval = Math.max(25, Math.min(1000, Math.floor(headersTimeout / 4)))
  return {
    // Fastify sets the server's requestTimeout and keepAliveTimeout from its own options (after
    // creating it with `http`), and passes `http` to http.createServer for the rest
    requestTimeout,
    keepAliveTimeout: config.SERVER_KEEP_ALIVE_TIMEOUT_MS,
    http: { headersTimeout, requestTimeout, connectionsCheckingInterval },
  } as Partial<FastifyServerOptions>
}

/** Errors Node raises before a request reaches Fastify (a timeout, unreadable HTTP), answered as `{error}`. */
export function clientErrorHandler(this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  const [status, message] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'request timeout: the request, headers and body, did not arrive in time']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'request headers too large']
        : [400, 'malformed HTTP request']
  this.log.debug({ err: error }, 'client error')
  // as Node does: never write into an answer already under way (a 413 sent while the body still comes)
  const answering = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true
  if (socket.writable && !answering) {
    const body = JSON.stringify({ error: message })
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`,
    )
  }
  socket.destroy(error)
}
