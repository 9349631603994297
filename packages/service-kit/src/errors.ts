import { STATUS_CODES } from 'node:http'
import { identityHeaders, type Failure } from '@ats/contracts'
import createError from '@fastify/error'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

/**
 * The kit's error registry. Every code is prefixed ATS_ERR_ and means one thing (one status, one
 * name: the code's words); a service declares its own with the same createError in its own
 * src/errors.ts, never inline (docs/architecture.md, "Errors"). Errors from a registry are safe
 * to show, so their message reaches the client even with a 5xx status (503 "server wallet not
 * configured"); any other 5xx is logged and answered without detail.
 */
export { createError }

/** An error's first line (viem's and undici's messages go on with details a log or a client does not need). */
export const firstLine = (error: unknown): string => (error instanceof Error ? error.message : String(error)).split('\n')[0]!

/** `promise`, or a rejection with `error()` when it has not settled within `ms`. */
export function withTimeout<T>(promise: Promise<T>, ms: number, error: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(error()), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

export const NotFound = createError<[string]>('ATS_ERR_NOT_FOUND', '%s not found', 404)
export const Unauthorized = createError<[string]>('ATS_ERR_UNAUTHORIZED', '%s', 401)
export const Forbidden = createError<[string]>('ATS_ERR_FORBIDDEN', '%s', 403)
export const BadRequest = createError<[string]>('ATS_ERR_BAD_REQUEST', '%s', 400)
export const Unavailable = createError<[string]>('ATS_ERR_UNAVAILABLE', '%s', 503)
/** A request body over BODY_LIMIT_BYTES: the gateway's answer before proxying, and a service's own. */
export const BodyTooLarge = createError<[number]>('ATS_ERR_BODY_TOO_LARGE', 'request body too large: the limit is %d bytes', 413)

// ---- outside APIs (http.ts) ----

/** @fastify/error keeps a trailing { cause } as the error's cause, for logs */
type Cause = { cause: unknown }

/**
 * The upstream failed after its retries: a 5xx, an unreadable answer or no connection.
 * The message names the upstream and the status or reason, never a URL (query strings carry api keys).
 */
export const UpstreamFailed = createError<[string, string, Cause?]>('ATS_ERR_UPSTREAM_FAILED', '%s failed: %s', 502)
/**
 * No whole answer (headers and body) within the deadline. A 503, like a rate limit: the
 * upstream is busy or away for now and the same request may work later (clients retry
 * 503s; a 502 says the upstream answered something broken).
 */
export const UpstreamTimeout = createError<[string, number, Cause?]>('ATS_ERR_UPSTREAM_TIMEOUT', '%s did not answer within %d ms', 503)
/** The upstream kept answering 429 through the retries, or asked to wait longer than allowed. */
export const UpstreamRateLimited = createError<[string]>(
  'ATS_ERR_UPSTREAM_RATE_LIMITED',
  '%s is rate limiting our requests (429 Too Many Requests); try again later',
  503,
)

const UpstreamStatus = createError<[string, string]>('ATS_ERR_UPSTREAM_STATUS', '%s answered %s', 502)

/** "404 Not Found" */
export function describeStatus(status: number): string {
  const text = STATUS_CODES[status]
  return text ? `${status} ${text}` : String(status)
}

/**
 * The upstream refused the request with a 4xx other than 429. The caller decides what it
 * means (a 404 for an unknown token becomes its own 404); left unhandled it answers 502,
 * since a refusal of our request (a bad api key, a changed API) is not the client's fault.
 */
export class UpstreamStatusError extends UpstreamStatus {
  override name = 'UpstreamStatusError'
  constructor(
    readonly upstream: string,
    /** the upstream's HTTP status */
    readonly status: number,
    /** its answer: parsed JSON, else the text, undefined when empty */
    readonly body: unknown,
  ) {
    super(upstream, describeStatus(status))
  }
}

// ---- calls between services (rpc.ts) ----

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

// ---- idempotency.ts ----

export const IdempotencyMismatch = createError<[string]>(
  'ATS_ERR_IDEMPOTENCY_MISMATCH',
  'idempotency key %s was used with a different request',
  409,
)
export const IdempotencyInProgress = createError<[]>(
  'ATS_ERR_IDEMPOTENCY_IN_PROGRESS',
  'a request with this idempotency key is still in progress',
  409,
)
export const IdempotencyKeyInvalid = createError<[]>(
  'ATS_ERR_IDEMPOTENCY_KEY_INVALID',
  'the Idempotency-Key header must be one value of 1 to 255 printable ASCII characters',
  400,
)
/** A stored error replayed: it takes the first error's status, code and message (see replayedError). */
export const IdempotencyReplayed = createError<[string]>('ATS_ERR_IDEMPOTENCY_REPLAYED', '%s', 400)
/** What a key replays when its first request ran but the result could not be stored (not JSON). */
export const IdempotencyUnstorable = createError<[]>(
  'ATS_ERR_IDEMPOTENCY_UNSTORABLE',
  'the first request with this idempotency key ran, but its result could not be stored',
  500,
)

// ---- sharedCache.ts ----

/** A failure shared from the replica that met it: the first error's status, code and message. */
export const SharedFailure = createError<[string]>('ATS_ERR_SHARED_FAILURE', '%s', 502)

const isOurs = (error: { code?: unknown }) => typeof error.code === 'string' && error.code.startsWith('ATS_ERR_')

/** A registry error's status when `accept` takes it; undefined for anything else. */
function registryStatus(error: unknown, accept: (status: number) => boolean): number | undefined {
  const { statusCode, code } = (error ?? {}) as { statusCode?: unknown; code?: unknown }
  return isOurs({ code }) && typeof statusCode === 'number' && accept(statusCode) ? statusCode : undefined
}

/** Whether `error` comes from a registry with a status: safe to show, and to share (sharedCache.ts). */
export const isRegistryError = (error: unknown): error is Error & { statusCode: number; code: string } =>
  registryStatus(error, () => true) !== undefined

/** The status of a registry error a client caused (4xx), or undefined for anything else. */
export const clientErrorStatus = (error: unknown) => registryStatus(error, (status) => status >= 400 && status < 500)

/** The statuses that cross a NATS call as themselves: the client's 4xx, and the 503/504 that say "try later". */
export const isForwardedStatus = (status: number) => (status >= 400 && status < 500) || status === 503 || status === 504

/**
 * The status a registry error keeps when it crosses a NATS call (server wallet not configured,
 * receipt not seen in time, any 4xx); undefined otherwise.
 */
export const forwardedErrorStatus = (error: unknown) => registryStatus(error, isForwardedStatus)

// Postgres going away (a restart, a failover): Prisma's "can't reach", "timed out" and "closed"
// codes and its pool timeout; Postgres's admin shutdown, crash shutdown and "starting or
// shutting down" (57P01-03) and every connection exception (class 08)
const prismaUnavailable = new Set(['P1001', 'P1002', 'P1017', 'P2024'])
const postgresUnavailable = (code: unknown) => typeof code === 'string' && (/^57P0[123]$/.test(code) || /^08[0-9A-Z]{3}$/.test(code))

/**
 * Whether `error` says the database is out of reach for now (restarting, failing over): a 503
 * the client may retry, not a 500. Prisma carries the driver's error in meta.driverAdapterError.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  // an error that wraps one (`new Error(…, { cause })`) is as unavailable as its cause
  for (let depth = 0; error && depth < 5; depth++, error = (error as { cause?: unknown }).cause) {
    const { code, meta } = error as { code?: unknown; meta?: { driverAdapterError?: { cause?: Record<string, unknown> } } }
    const cause = meta?.driverAdapterError?.cause
    if (
      (typeof code === 'string' && prismaUnavailable.has(code)) ||
      postgresUnavailable(code) ||
      // not reachable, or the connection cut under a query (the server crashed or failed over)
      cause?.kind === 'DatabaseNotReachable' ||
      cause?.kind === 'ConnectionClosed' ||
      postgresUnavailable(cause?.originalCode)
    )
      return true
  }
  return false
}

export const databaseUnavailableMessage = 'the database is unavailable for a moment (restarting or failing over); try again'
/** What a client gets for a query the database could not take just now: retry. */
export const DatabaseUnavailable = createError<[string]>('ATS_ERR_DATABASE_UNAVAILABLE', '%s', 503)

export function statusOf(error: FastifyError): number {
  const status = error.statusCode ?? 500
  return status >= 400 && status < 600 ? status : 500
}

/** The request field a validation error is about, as OpenAI names it: `messages[1].role`. */
function validationParam(error: FastifyError): string | undefined {
  const [first] = error.validation ?? []
  if (!first) return undefined
  const missing = (first.params as { missingProperty?: string }).missingProperty
  const parts = [...(first.instancePath ?? '').split('/').slice(1), ...(missing ? [missing] : [])]
  const path = parts.map((part, i) => (/^[0-9]+$/.test(part) ? `[${part}]` : i === 0 ? part : `.${part}`)).join('')
  return path || undefined
}

/**
 * The problem, said plainly. Missing fields first, all of them at once (the API's
 * "Missing required params", e.g. `Missing required params: tokenIn, amountIn (querystring)`);
 * otherwise the first problem: where, what, and the allowed values when there is a list.
 */
function validationMessage(error: FastifyError): string {
  const problems = error.validation ?? []
  const [first] = problems
  if (!first) return error.message
  const context = error.validationContext ?? 'request'
  const missing = problems.flatMap((problem) => {
    const name = (problem.params as { missingProperty?: string }).missingProperty
    // a nested field is named by its path: policy/maxUsdPerSwap
    return name ? [[problem.instancePath?.slice(1), name].filter(Boolean).join('/')] : []
  })
  if (missing.length > 0) return `Missing required params: ${[...new Set(missing)].join(', ')} (${context})`
  const where = `${context}${first.instancePath ?? ''}`
  const allowed = (first.params as { allowedValues?: unknown[] }).allowedValues
  return `${where} ${first.message}${allowed ? `: ${allowed.join(', ')}` : ''}`
}

/** How a scope writes a failure: the API's `{error}` string, or another shape (/v1 answers OpenAI's). */
export type ErrorFormat = (failure: Failure) => unknown

/** The error body of the whole API (docs/keys-and-limits.md): `{error: string}`. */
export const errorBody: ErrorFormat = ({ message }) => ({ error: message })

/**
 * What a client may see of an error: a validation problem named in words (400), a registry error
 * with its status, message, code and `param`; anything else a bare 500 or 503 (`internal`: log it).
 */
export function publicFailure(error: FastifyError): Failure & { internal: boolean } {
  if (error.validation) return { status: 400, message: validationMessage(error), param: validationParam(error), internal: false }
  if (isDatabaseUnavailable(error)) error = new DatabaseUnavailable(databaseUnavailableMessage)
  const status = statusOf(error)
  if (status >= 500 && !isOurs(error))
    return { status, message: status === 503 ? 'service unavailable' : 'internal server error', internal: true }
  const { param } = error as { param?: unknown }
  return { status, message: error.message, code: error.code, param: typeof param === 'string' ? param : undefined, internal: false }
}

/** The error handler: the status and message a client may see, written by `format`. */
export function errorHandler(format: ErrorFormat = errorBody) {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    reply.header(identityHeaders.requestId, request.id)
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      error = new BodyTooLarge(request.routeOptions.bodyLimit ?? 0)
      // Fastify closes the connection, and a sender still writing the body (the gateway's proxy)
      // loses the answer: with a declared length, Node reads the rest and the sender gets the 413
      if (request.headers['content-length'] !== undefined) reply.removeHeader('connection')
    }
    const { internal, ...failure } = publicFailure(error)
    if (internal) request.log.error({ err: error }, 'request failed')
    else if (failure.status >= 500) request.log.warn({ code: error.code, status: failure.status }, failure.message)
    return reply.code(failure.status).send(format(failure))
  }
}

/** One error handler for every process, and its answer for unknown routes: `{error: string}` unless `format` says otherwise. */
export function installErrorHandler(app: FastifyInstance, format: ErrorFormat = errorBody): void {
  app.setErrorHandler(errorHandler(format))
  app.setNotFoundHandler((request, reply) => {
    reply.header(identityHeaders.requestId, request.id)
    reply
      .code(404)
      .send(format({ status: 404, message: `no route ${request.method} ${request.url.split('?')[0]}`, code: 'ATS_ERR_NOT_FOUND' }))
  })
}
