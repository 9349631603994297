import { tierAllows, type RouteAuth } from '@ats/contracts'
import { Forbidden, Unauthorized, Unavailable } from '@ats/service-kit'
import type { FastifyRequest, onRequestHookHandler } from 'fastify'
import type { KeyResolver, ResolvedKey } from './keyResolver.ts'
import type { PaymentGuard } from './paymentGuard.ts'
import type { KeyLimiter } from './rateLimit.ts'

const bearer = /^Bearer\s+(\S{16,256})\s*$/i

function rawKey(request: FastifyRequest): string {
  const header = request.headers.authorization
  if (!header) throw new Unauthorized('missing API key: send Authorization: Bearer <key>')
  const match = bearer.exec(header)
  if (!match?.[1]) throw new Unauthorized('malformed Authorization header: expected Bearer <key>')
  return match[1]
}

/** The onRequest hook of one route group: who may pass, and as whom. */
export function authHook(auth: RouteAuth, keys: KeyResolver, limit: KeyLimiter, pay: PaymentGuard): onRequestHookHandler {
  if (auth.kind === 'none') return async () => {}
  if (auth.kind === 'payment') return pay.onRequest
  const need = auth.tier
  const admit = (request: FastifyRequest, key: ResolvedKey | null) => {
    if (!key) throw new Unauthorized('invalid or revoked API key')
    if (!tierAllows(key.tier, need)) throw new Forbidden(`this route needs an API key of tier ${need} or higher; this key is ${key.tier}`)
    request.identity = { ownerId: key.id, keyId: key.id, tier: key.tier }
  }
  return async (request, reply) => {
    const raw = rawKey(request)
    let key = keys.cached(raw)
    if (key === undefined) {
      try {
        key = await keys.resolve(raw)
      } catch (error) {
        request.log.error({ err: error }, 'key verification failed')
        throw new Unavailable('API key verification is unavailable, try again shortly')
      }
    }
    admit(request, key)
    await limit(request, reply)
  }
}
