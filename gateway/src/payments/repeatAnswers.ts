// The answer a payment id's repeats get (paymentIds.ts), taken from the reply of the run that was
// charged as the client got it: the status, the headers that describe the answer, the body up
// to PAYMENT_ID_ANSWER_MAX_BYTES. A stream of server-sent events is never kept.
import { Readable } from 'node:stream'
import { jobIdHeader } from '@ats/contracts'
import type { FastifyReply } from 'fastify'
import type { StoredAnswer } from './paymentIds.ts'

/** Marks an answer given again to a repeat (the name Stripe's idempotent requests use). */
export const repeatedAnswerHeader = 'idempotent-replayed'

/** What describes the answer; the rest (request id, rate limits, dates) belongs to each request. */
const keptHeaders = [
  'content-type',
  'content-encoding',
  'content-language',
  'cache-control',
  'etag',
  'last-modified',
  'location',
  jobIdHeader,
  'payment-response',
  'x-payment-response',
]

export type ReadAnswer =
  /** the whole body, to keep and to send */
  | { kind: 'body'; body: Buffer }
  /** an answer that is sent but not kept, with the reason repeats are told */
  | { kind: 'not_stored'; reason: string; payload: unknown }
  /** the service's answer broke off while it was read */
  | { kind: 'broken' }

/** Reads at most `maxBytes` of a stream: the whole body, or a stream of all of it (what was read, then the rest). */
async function readUpTo(stream: Readable, maxBytes: number): Promise<{ body: Buffer } | { whole: Readable }> {
  const chunks: Buffer[] = []
  let size = 0
  const iterator = stream[Symbol.asyncIterator]()
  for (;;) {
    const next = await iterator.next()
    if (next.done) return { body: Buffer.concat(chunks, size) }
    const chunk = Buffer.isBuffer(next.value) ? next.value : Buffer.from(next.value)
    chunks.push(chunk)
    size += chunk.length
    if (size > maxBytes) {
      async function* rest() {
        yield* chunks
        for (let more = await iterator.next(); !more.done; more = await iterator.next()) yield more.value
      }
      return { whole: Readable.from(rest(), { objectMode: false }) }
    }
  }
}

/** The body of a reply (the `onSend` payload: a string, a buffer, a stream or nothing), read to be kept if it can be. */
export async function readAnswer(reply: FastifyReply, payload: unknown, maxBytes: number): Promise<ReadAnswer> {
  const type = String(reply.getHeader('content-type') ?? '')
  const tooLarge = `larger than the ${maxBytes} bytes kept`
  if (type.startsWith('text/event-stream')) return { kind: 'not_stored', reason: 'a stream of events is not kept', payload }
  if (payload === null || payload === undefined) return { kind: 'body', body: Buffer.alloc(0) }
  if (typeof payload === 'string' || Buffer.isBuffer(payload)) {
    const body = Buffer.from(payload)
    return body.length > maxBytes ? { kind: 'not_stored', reason: tooLarge, payload } : { kind: 'body', body }
  }
  if (!(payload instanceof Readable)) return { kind: 'not_stored', reason: 'an answer of an unknown kind', payload }
  if (Number(reply.getHeader('content-length') ?? 0) > maxBytes) return { kind: 'not_stored', reason: tooLarge, payload }
  try {
    const read = await readUpTo(payload, maxBytes)
    return 'body' in read ? { kind: 'body', body: read.body } : { kind: 'not_stored', reason: tooLarge, payload: read.whole }
  } catch {
    return { kind: 'broken' }
  }
}

/** The answer as repeats get it: the reply's status and kept headers (the payment response included), with `body`. */
export function answerOf(reply: FastifyReply, body: Buffer): StoredAnswer {
  const headers: Record<string, string> = {}
  for (const name of keptHeaders) {
    const value = reply.getHeader(name)
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : String(value)
  }
  return { status: reply.statusCode, headers, body }
}

/** Answers a repeat with the stored answer. */
export function replay(reply: FastifyReply, answer: StoredAnswer) {
  return reply.code(answer.status).headers(answer.headers).header(repeatedAnswerHeader, 'true').send(answer.body)
}
