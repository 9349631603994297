import rateLimit from '@fastify/rate-limit'
import { tiers, type Tier } from '@ats/contracts'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Redis } from 'ioredis'
import { PaidRateLimited, RateLimited } from '../errors.ts'
import { leasedCounterStore, memoryCounterStore } from './leasedCounter.ts'

export interface TierLimits {
  windowMs: number
  perTier: Record<Tier, number>
}

/** Counts one request of an authenticated key; throws 429 when it is over its tier's limit. */
export type KeyLimiter = (request: FastifyRequest, reply: FastifyReply) => Promise<void>

/**
 * Per-key rate limits by tier with @fastify/rate-limit, one count per key across
 * all routes. With Redis every gateway replica counts against the same window
 * (see leasedCounter.ts); without it each process counts alone. If Redis fails
 * mid-flight the request goes through (logged): an outage of the counter must not
 * take the API down.
 *
 * The limiter is called from the auth hook once the key is known, rather than as a
 * hook of its own: a separate per-route hook cost the gateway ~13 µs a request.
 */
export async function createKeyLimiter(app: FastifyInstance, limits: TierLimits, redis: Redis | undefined): Promise<KeyLimiter> {
  await app.register(rateLimit, {
    global: false,
    store: redis ? leasedCounterStore(redis, 'ats-rl:') : memoryCounterStore(),
    skipOnError: true,
    timeWindow: limits.windowMs,
  })
  const keyOf = (request: FastifyRequest) => request.identity.keyId!
  const byTier = Object.fromEntries(
    tiers.map((tier) => [tier, app.createRateLimit({ keyGenerator: keyOf, max: limits.perTier[tier], timeWindow: limits.windowMs })]),
  ) as Record<Tier, ReturnType<FastifyInstance['createRateLimit']>>
  const windowSeconds = limits.windowMs / 1000

  return async (request, reply) => {
    const result = await byTier[request.identity.tier!](request)
    if (result.isAllowed) return
    reply.header('x-ratelimit-limit', result.max)
    reply.header('x-ratelimit-remaining', result.remaining)
    reply.header('x-ratelimit-reset', result.ttlInSeconds)
    if (result.isExceeded) {
      reply.header('retry-after', result.ttlInSeconds)
      throw new RateLimited(result.max, windowSeconds, result.ttlInSeconds)
    }
  }
}

export interface PaidLimits {
  /** the fleet's NATS namespace: fleets sharing one Redis count apart (addresses and payers, unlike key ids, recur) */
  namespace: string
  windowMs: number
  /** paid requests per client address per window */
  perAddress: number
  /** paid requests per payer per window */
  perPayer: number
}

/** Counts paid requests: per client address before any payment check, per payer once one is verified. */
export interface PaidLimiter {
  /** throws 429 when this client address is over its limit; costs no RPC call, so it runs first */
  address(request: FastifyRequest, reply: FastifyReply): Promise<void>
  /** throws 429 when this (verified) payer is over its limit */
  payer(request: FastifyRequest, reply: FastifyReply, payer: string): Promise<void>
}

/**
 * Paid routes have no key, so the key limiter never counted them: a client could send any
 * number of payments, each costing a signature check and, for a payer not yet cached, a
 * balance RPC call. The counts share the key limiter's store (Redis when set); call after
 * createKeyLimiter, which registers the plugin.
 */
export function createPaidLimiter(app: FastifyInstance, limits: PaidLimits): PaidLimiter {
  const byAddress = app.createRateLimit({
    keyGenerator: (request) => `paid-address:${limits.namespace}:${request.ip}`,
    max: limits.perAddress,
    timeWindow: limits.windowMs,
  })
  const payers = new WeakMap<FastifyRequest, string>()
  const byPayer = app.createRateLimit({
    keyGenerator: (request) => `paid-payer:${limits.namespace}:${payers.get(request)}`,
    max: limits.perPayer,
    timeWindow: limits.windowMs,
  })
  const windowSeconds = limits.windowMs / 1000
  const check = async (request: FastifyRequest, reply: FastifyReply, limiter: typeof byAddress, who: string) => {
    const result = await limiter(request)
    if (result.isAllowed || !result.isExceeded) return
    reply.header('retry-after', result.ttlInSeconds)
    throw new PaidRateLimited(result.max, windowSeconds, who, result.ttlInSeconds)
  }
  return {
    address: (request, reply) => check(request, reply, byAddress, 'client address'),
    payer: (request, reply, payer) => {
      payers.set(request, payer.toLowerCase())
      return check(request, reply, byPayer, 'payer')
    },
  }
}
