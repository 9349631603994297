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
    const tier = header(request, identityHeaders.tier)
    const identity: Identity = {}
    const ownerId = header(request, identityHeaders.ownerId)
    const keyId = header(request, identityHeaders.keyId)
    const wallet = header(request, identityHeaders.wallet)
    const idempotencyKey = header(request, identityHeaders.idempotencyKey)
    if (ownerId) identity.ownerId = ownerId
    if (keyId) identity.keyId = keyId
    if (wallet) identity.wallet = wallet
    if (isTier(tier)) identity.tier = tier
    if (idempotencyKey) identity.idempotencyKey = idempotencyKey
    request.identity = identity
  })
}

/** What a NATS call made while serving `request` carries along: its request id and the caller's identity. */
export const callContextOf = (request: FastifyRequest) => ({ requestId: request.id, identity: request.identity ?? {} })
