import { timingSafeEqual } from 'node:crypto'
import { identityHeaders, isTier, type Identity } from '@ats/contracts'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { Unauthorized } from './errors.ts'

declare module 'fastify' {
  interface FastifyRequest {
    identity: Identity
  }
}

/** Routes a probe or scraper calls directly, without the gateway. */
export const operationalRoutes = new Set(['/health', '/ready', '/metrics'])

const header = (request: FastifyRequest, name: string) => {
  const value = request.headers[name]
  return typeof value === 'string' && value !== '' ? value : undefined
}

/** The caller's identity from the gateway's headers (HTTP, or a NATS call's): each field only when set. */
export function identityOf(get: (name: string) => string | undefined): Identity {
  const identity: Identity = {}
  for (const field of ['ownerId', 'keyId', 'wallet'] as const) {
    const value = get(identityHeaders[field])
    if (value) identity[field] = value
  }
  const tier = get(identityHeaders.tier)
  if (isTier(tier)) identity.tier = tier
  return identity
}

/**
 * Services trust identity headers only from the gateway: every request but the
 * operational ones must carry the internal token, compared in constant time.
 */
export function installIdentity(app: FastifyInstance, internalToken: string): void {
  const expected = Buffer.from(internalToken)
  app.addHook('onRequest', async (request) => {
    if (operationalRoutes.has(request.routeOptions.url ?? '')) return
    const token = Buffer.from(header(request, identityHeaders.internalToken) ?? '')
    if (token.length !== expected.length || !timingSafeEqual(token, expected)) {
      throw new Unauthorized('this service answers only requests forwarded by the gateway')
    }
    const identity = identityOf((name) => header(request, name))
    const idempotencyKey = header(request, identityHeaders.idempotencyKey)
    if (idempotencyKey) identity.idempotencyKey = idempotencyKey
    request.identity = identity
  })
}

/** What a NATS call made while serving `request` carries along: its request id and the caller's identity. */
export const callContextOf = (request: FastifyRequest) => ({ requestId: request.id, identity: request.identity ?? {} })
