// The body of a paid request with a payment id, read whole so its fingerprint can be taken before
// the request is forwarded (the proxy otherwise streams bodies through unread). It is bounded:
// the edge's body limit (routes/bodyLimit.ts) has refused anything over BODY_LIMIT_BYTES.
import { Readable } from 'node:stream'
import type { FastifyRequest } from 'fastify'

/** The body's bytes; a streamed body is read and put back as a stream of the same bytes for the proxy. */
export async function bodyBytes(request: FastifyRequest): Promise<Buffer> {
  const body = request.body
  if (body === undefined || body === null) return Buffer.alloc(0)
  if (Buffer.isBuffer(body)) return body
  if (typeof body === 'string') return Buffer.from(body)
  if (!(body instanceof Readable)) return Buffer.from(JSON.stringify(body))
  const chunks: Buffer[] = []
  for await (const chunk of body as AsyncIterable<Buffer>) chunks.push(chunk)
  const bytes = Buffer.concat(chunks)
  request.body = Readable.from([bytes], { objectMode: false })
  return bytes
}
