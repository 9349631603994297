import { Type, type Static } from 'typebox'

/** The one error body of the whole public API (docs/keys-and-limits.md). */
export const ErrorBody = Type.Object(
  { error: Type.String({ description: 'what went wrong, in words a client can act on' }) },
  { $id: 'ErrorBody', additionalProperties: false },
)
export type ErrorBody = Static<typeof ErrorBody>
