import { identityHeaders } from '@ats/contracts'
import createError from '@fastify/error'
import type { FastifyError, FastifyInstance } from 'fastify'

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

const isOurs = (error: { code?: unknown }) => typeof error.code === 'string' && error.code.startsWith('ATS_ERR_')

/** The status of a registry error a client caused (4xx), or undefined for anything else. */
export function clientErrorStatus(error: unknown): number | undefined {
  const { statusCode } = (error ?? {}) as { statusCode?: unknown }
  const ours = isOurs((error ?? {}) as { code?: unknown })
  return ours && typeof statusCode === 'number' && statusCode >= 400 && statusCode < 500 ? statusCode : undefined
}

export function statusOf(error: FastifyError): number {
  const status = error.statusCode ?? 500
  return status >= 400 && status < 600 ? status : 500
}

/** The first problem, said plainly: where, what, and the allowed values when there is a list. */
function validationMessage(error: FastifyError): string {
  const [first] = error.validation ?? []
  if (!first) return error.message
  const where = `${error.validationContext ?? 'request'}${first.instancePath ?? ''}`
  const missing = (first.params as { missingProperty?: string }).missingProperty
  if (missing) return `${where}/${missing} is required`
  const allowed = (first.params as { allowedValues?: unknown[] }).allowedValues
  return `${where} ${first.message}${allowed ? `: ${allowed.join(', ')}` : ''}`
}

/** One error handler for every process: always `{error: string}`. */
export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    reply.header(identityHeaders.requestId, request.id)
    if (error.validation) return reply.code(400).send({ error: validationMessage(error) })
    const status = statusOf(error)
    if (status >= 500 && !isOurs(error)) {
      request.log.error({ err: error }, 'request failed')
      return reply.code(status).send({ error: status === 503 ? 'service unavailable' : 'internal server error' })
    }
    if (status >= 500) request.log.warn({ code: error.code, status }, error.message)
    return reply.code(status).send({ error: error.message })
  })
  app.setNotFoundHandler((request, reply) => {
    reply.header(identityHeaders.requestId, request.id)
    reply.code(404).send({ error: `no route ${request.method} ${request.url.split('?')[0]}` })
  })
}
