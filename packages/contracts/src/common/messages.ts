import type { Static, TSchema } from 'typebox'
import { Compile } from 'typebox/compile'

/** NATS messages: a codec per schema, checked both ways, and the two kinds of channel. */
export class MessageError extends Error {
  override name = 'MessageError'
}

export interface Codec<T> {
  encode(value: T): Uint8Array
  decode(data: Uint8Array): T
}

/** A request/reply endpoint: its subject and both message codecs. */
export interface Endpoint<Req, Rep> {
  subject: string
  request: Codec<Req>
  reply: Codec<Rep>
}

/** A broadcast or stream message: its subject and codec. */
export interface Topic<M> {
  subject: string
  message: Codec<M>
}

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** compiled codecs by schema: compiling costs about a millisecond, and channels built per id (a job's events) reuse one */
const compiled = new WeakMap<TSchema, Codec<unknown>>()

/** JSON codec for one NATS message schema: both directions are checked. One per schema, compiled once. */
export function codec<S extends TSchema>(schema: S): Codec<Static<S>> {
  const known = compiled.get(schema)
  if (known) return known as Codec<Static<S>>
  const made = compile(schema)
  compiled.set(schema, made as Codec<unknown>)
  return made
}

function compile<S extends TSchema>(schema: S): Codec<Static<S>> {
  const validator = Compile(schema)
  const check = (value: unknown): Static<S> => {
    if (validator.Check(value)) return value as Static<S>
    const [first] = validator.Errors(value)
    throw new MessageError(`invalid message: ${first ? `${first.instancePath || '/'} ${first.message}` : 'does not match its schema'}`)
  }
  return {
    encode: (value) => encoder.encode(JSON.stringify(check(value))),
    decode: (data) => {
      let parsed: unknown
      try {
        parsed = JSON.parse(decoder.decode(data))
      } catch {
        throw new MessageError('invalid message: not JSON')
      }
      return check(parsed)
    },
  }
}

export function endpoint<Req extends TSchema, Rep extends TSchema>(
  subject: string,
  request: Req,
  reply: Rep,
): Endpoint<Static<Req>, Static<Rep>> {
  return { subject, request: codec(request), reply: codec(reply) }
}

export function topic<M extends TSchema>(subject: string, message: M): Topic<Static<M>> {
  return { subject, message: codec(message) }
}
