import { Type } from 'typebox'

/** The one error body of the whole public API (docs/keys-and-limits.md). */
export const ErrorBody = Type.Object(
  { error: Type.String({ description: 'what went wrong, in words a client can act on' }) },
  { $id: 'ErrorBody', additionalProperties: false },
)

/** What every route behind an API key may answer besides its own: a bad request, no or a bad key, a tier too low, a rate limit. */
export const keyRouteErrors = { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 429: ErrorBody }
/** ...and a route that reads the chain or an upstream API: it failing (502), unavailable (503) or too slow (504). */
export const upstreamRouteErrors = { ...keyRouteErrors, 502: ErrorBody, 503: ErrorBody, 504: ErrorBody }
