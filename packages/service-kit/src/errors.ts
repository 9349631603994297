import { identityHeaders, type Failure } from '@ats/contracts'
import createError from '@fastify/error'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

/**
 * The kit's error registry. Every code is prefixed ATS_ERR_; a service adds its
 * own with the same createError. Errors from a registry are safe to show, so
 * their message reaches the client even with a 5xx status (503 "server wallet
 * not configured"); any other 5xx is logged and answered without detail.
 */
export { createError }

export const NotFound = createError<[string]>('ATS_ERR_NOT_FOUND', '%s not found', 404)
export const Unauthorized = createError<[string]>('ATS_ERR_UNAUTHORIZED', '%s', 401)
export const Forbidden = createError<[string]>('ATS_ERR_FORBIDDEN', '%s', 403)
export const BadRequest = createError<[string]>('ATS_ERR_BAD_REQUEST', '%s', 400)
export const Unavailable = createError<[string]>('ATS_ERR_UNAVAILABLE', '%s', 503)
/** A request body over BODY_LIMIT_BYTES: the gateway's answer before proxying, and a service's own. */
export const BodyTooLarge = createError<[number]>('ATS_ERR_BODY_TOO_LARGE', 'request body too large: the limit is %d bytes', 413)

const isOurs = (error: { code?: unknown }) => typeof error.code === 'string' && error.code.startsWith('ATS_ERR_')

/** The status of a registry error a client caused (4xx), or undefined for anything else. */
export function clientErrorStatus(error: unknown): number | undefined {
  const { statusCode } = (error ?? {}) as { statusCode?: unknown }
  const ours = isOurs((error ?? {}) as { code?: unknown })
  return ours && typeof statusCode === 'number' && statusCode >= 400 && statusCode < 500 ? statusCode : undefined
}

/** The statuses that cross a NATS call as themselves: the client's 4xx, and the 503/504 that say "try later". */
export const isForwardedStatus = (status: number) => (status >= 400 && status < 500) || status === 503 || status === 504

/**
 * The status a registry error keeps when it crosses a NATS call (server wallet not configured,
 * receipt not seen in time, any 4xx); undefined otherwise.
 */
export function forwardedErrorStatus(error: unknown): number | undefined {
  const { statusCode, code } = (error ?? {}) as { statusCode?: unknown; code?: unknown }
  return isOurs({ code }) && typeof statusCode === 'number' && isForwardedStatus(statusCode) ? statusCode : undefined
}

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
 * The problem, said plainly. Missing fields first, all of them at once (spec section 4:
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

/** The error body of the whole API (spec section 7): `{error: string}`. */
export const errorBody: ErrorFormat = ({ message }) => ({ error: message })

/**
 * What a client may see of an error: a validation problem named in words (400), a registry error
 * with its status, message, code and `param`; anything else a bare 500 or 503 (`internal`: log it).
 */
export function publicFailure(error: FastifyError): Failure & { internal: boolean } {
  if (error.validation) return { status: 400, message: validationMessage(error), param: validationParam(error), internal: false }
  const status = statusOf(error)
  if (status >= 500 && !isOurs(error)) return { status, message: status === 503 ? 'service unavailable' : 'internal server error', internal: true }
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
    else if (failure.status >= 500) request.log.warn({ code: error.code, status: failure.status }, error.message)
    return reply.code(failure.status).send(format(failure))
  }
}

/** One error handler for every process, and its answer for unknown routes: `{error: string}` unless `format` says otherwise. */
export function installErrorHandler(app: FastifyInstance, format: ErrorFormat = errorBody): void {
  app.setErrorHandler(errorHandler(format))
  app.setNotFoundHandler((request, reply) => {
    reply.header(identityHeaders.requestId, request.id)
    reply.code(404).send(format({ status: 404, message: `no route ${request.method} ${request.url.split('?')[0]}`, code: 'ATS_ERR_NOT_FOUND' }))
  })
}
