import { apiKeyPattern, hashApiKey, tierAllows } from '@ats/contracts'
import { createError, Forbidden, Unauthorized, Unavailable } from '@ats/service-kit'
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import type { PaymentGuard } from '../payments/paymentGuard.ts'
import type { RouteAuth } from '../routing/routeTable.ts'
import type { AuthFailureLimiter } from './authFailures.ts'
import type { KeyResolver, ResolvedKey } from './keyResolver.ts'
import type { KeyLimiter } from './rateLimit.ts'

/** Who may pass a route group, and as whom: the onRequest hook of each group. */
const TooManyFailures = createError<[number]>(
  'ATS_ERR_AUTH_FAILURES',
  'too many failed authentications from this address; retry in %s s',
  429,
)

const bearer = /^Bearer\s+(\S+)\s*$/i

/** The raw key of the Authorization header; a missing or malformed one is a 401 before any lookup. */
function rawKey(request: FastifyRequest): string {
  const header = request.headers.authorization
  if (!header) throw new Unauthorized('missing API key: send Authorization: Bearer <key>')
  const key = bearer.exec(header)?.[1]
  if (!key) throw new Unauthorized('malformed Authorization header: expected Bearer <key>')
  if (!apiKeyPattern.test(key)) throw new Unauthorized('malformed API key: keys are atsk_ followed by 32 characters')
  return key
}

export interface AuthDeps {
  keys: KeyResolver
  limit: KeyLimiter
  pay: PaymentGuard
  failures: AuthFailureLimiter
}

export function authHook(auth: RouteAuth, { keys, limit, pay, failures }: AuthDeps): onRequestHookHandler {
  if (auth.kind === 'none') return async () => {}
  if (auth.kind === 'payment') return pay.onRequest
  const need = auth.tier

  async function resolve(request: FastifyRequest, reply: FastifyReply): Promise<ResolvedKey> {
    let hash: string
    try {
      hash = hashApiKey(rawKey(request))
    } catch (error) {
      refuseIfFlooding(request, reply)
      await failures.failed(request.ip)
      throw error
    }
    let key = keys.cached(hash)
    if (key) return key
    refuseIfFlooding(request, reply)
    if (key === undefined) {
      try {
        key = await keys.resolve(hash)
      } catch (error) {
        request.log.error({ err: error }, 'key verification failed')
        throw new Unavailable('API key verification is unavailable, try again shortly')
      }
    }
    if (!key) {
      await failures.failed(request.ip)
      throw new Unauthorized('invalid or revoked API key')
    }
    return key
  }

  function refuseIfFlooding(request: FastifyRequest, reply: FastifyReply) {
    const retryAfter = failures.retryAfter(request.ip)
    if (retryAfter === undefined) return
    reply.header('retry-after', retryAfter)
    throw new TooManyFailures(retryAfter)
  }

  return async (request, reply) => {
    const key = await resolve(request, reply)
    if (!tierAllows(key.tier, need)) throw new Forbidden(`this route needs an API key of tier ${need} or higher; this key is ${key.tier}`)
    request.identity = { ownerId: key.id, keyId: key.id, tier: key.tier, ...(key.wallet ? { wallet: key.wallet } : {}) }
    await limit(request, reply)
  }
}
