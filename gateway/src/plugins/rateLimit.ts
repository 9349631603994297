import rateLimit from '@fastify/rate-limit'
import type { Tier } from '@ats/contracts'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Redis } from 'ioredis'
import { leasedCounterStore, memoryCounterStore } from './leasedCounter.ts'

export interface TierLimits {
  windowMs: number
  perTier: Record<Tier, number>
}

/**
 * Per-key rate limits by tier, one count per key across all routes. With Redis
 * every gateway replica counts against the same window (see leasedCounter.ts);
 * without it each process counts alone. If Redis fails mid-flight the
 * request goes through (logged): an outage of the counter must not take the API down.
 */
export async function registerRateLimit(app: FastifyInstance, limits: TierLimits, redis: Redis | undefined) {
  await app.register(rateLimit, {
    global: false,
    hook: 'preHandler',
    store: redis ? leasedCounterStore(redis, 'ats-rl:') : memoryCounterStore(),
    skipOnError: true,
    timeWindow: limits.windowMs,
  })
}

/** Route config for a keyed group; the auth hook has set request.identity before it runs. */
export function keyedRateLimit(limits: TierLimits) {
  return {
    max: (request: FastifyRequest) => limits.perTier[request.identity.tier ?? 'readonly'],
    timeWindow: limits.windowMs,
    keyGenerator: (request: FastifyRequest) => request.identity.keyId ?? request.ip,
    errorResponseBuilder: (_request: FastifyRequest, context: { max: number; after: string; statusCode: number }) =>
      Object.assign(
        new Error(`rate limit exceeded: ${context.max} requests per ${limits.windowMs / 1000} s for this key; retry in ${context.after}`),
        { statusCode: context.statusCode },
      ),
  }
}
