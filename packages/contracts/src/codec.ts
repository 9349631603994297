import { Compile } from 'typebox/compile'
import type { Static, TSchema } from 'typebox'

export class MessageError extends Error {
  override name = 'MessageError'
}

export interface Codec<T> {
  encode(value: T): Uint8Array
  decode(data: Uint8Array): T
}

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** JSON codec for one NATS message schema: both directions are checked. */
export function codec<S extends TSchema>(schema: S): Codec<Static<S>> {
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
