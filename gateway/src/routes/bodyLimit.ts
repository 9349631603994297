// The edge's body limit: a body over BODY_LIMIT_BYTES is a 413 from the gateway, before any service sees a byte of it.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import { BodyTooLarge } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'

declare module 'fastify' {
  interface FastifyRequest {
    /** the whole body as received, read here before anything else needs it (the payment id's fingerprint); null without a body */
    bodyBytes: Buffer | null
  }
}

const expectsContinue = (headers: IncomingHttpHeaders) => headers.expect?.toLowerCase() === '100-continue'
const declaredTooLarge = (headers: IncomingHttpHeaders, limit: number) => Number(headers['content-length'] ?? 0) > limit

/** The whole body of a request, or a 413 as soon as it passes the limit (the rest is read and dropped). */
function readWithin(payload: Readable, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size <= limit) {
        chunks.push(chunk)
        return
      }
      payload.off('data', onData).off('end', onEnd)
      // drain what is still coming, so the connection can answer the 413 and carry on
      payload.resume()
      reject(new BodyTooLarge(limit))
    }
    const onEnd = () => resolve(Buffer.concat(chunks))
    // a client gone (or cut off by the request timeout) before the end: nothing goes on
    const onClose = () => reject(new Error('the client closed the connection before its body ended'))
    payload.on('data', onData).once('end', onEnd).once('error', reject).once('close', onClose)
  })
}

/**
 * The proxy streams bodies to the services, which refuse a large one and close the connection
 * while the gateway is still sending: the client saw "<service> unavailable" (503) at random.
 * So the gateway decides: a declared Content-Length over the limit is refused on arrival; with
 * `Expect: 100-continue` the 100 is sent only when the body fits (else the 413 comes instead
 * and the connection closes, as the client may or may not send the body); a chunked body is
 * counted and held until it ends, so a service never gets part of one. Services read the same
 * BODY_LIMIT_BYTES, so a body that passes here passes there.
 *
 * Every body, chunked or not, is read whole before the request goes on: a body streamed on as it
 * came would let a client sending a byte every few seconds hold one of its service's connections
 * for as long as it liked. So a slow client holds only its own connection to the gateway, until
 * SERVER_REQUEST_TIMEOUT_MS ends it with a 408.
 */
export function installBodyLimit(app: FastifyInstance, limit: number): void {
  app.decorateRequest('bodyBytes', null)
  // with a listener, Node leaves the 100 to us instead of sending it for every request
  app.server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (!declaredTooLarge(req.headers, limit)) res.writeContinue()
    app.server.emit('request', req, res)
  })
  // both hooks in callback style: most requests just pass them, and a callback costs them no promise
  app.addHook('onRequest', (request, reply, done) => {
    if (!declaredTooLarge(request.headers, limit)) return done()
    if (expectsContinue(request.headers)) reply.header('connection', 'close')
    throw new BodyTooLarge(limit)
  })
  app.addHook('preParsing', (request, _reply, payload, done) => {
    // no body at all: nothing to wait for
    if (request.headers['transfer-encoding'] === undefined && Number(request.headers['content-length'] ?? 0) === 0)
      return done(null, payload)
    readWithin(payload, limit).then((bytes) => {
      request.bodyBytes = bytes
      // one chunk: the proxy sends it to the service in one go
      done(null, Readable.from([bytes], { objectMode: false }))
    }, done)
  })
}
