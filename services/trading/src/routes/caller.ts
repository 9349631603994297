// Who a trading request is for, as the gateway authenticated it, and the key a spend runs under:
// what the swap and launchpad routes share.
import { generatedIdempotencyKey } from '@ats/contracts'
import { idempotencyKeyOf } from '@ats/service-kit'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Caller } from '../swaps/executions.ts'

export const callerOf = (request: FastifyRequest): Caller => ({ keyId: request.identity.keyId, ownerId: request.identity.ownerId })

/**
 * The Idempotency-Key a spend runs under: the client's, or one generated for it, answered in the
 * idempotency-key header (on errors too: a 504 can be repeated with it) and the result's
 * `idempotencyKey`, so every execute and launch can be retried without spending twice.
 */
export function spendKeyOf(request: FastifyRequest, reply: FastifyReply): string {
  const key = idempotencyKeyOf(request.headers) ?? generatedIdempotencyKey()
  reply.header('idempotency-key', key)
  return key
}

/** The key the gateway authenticated; its routes are per key. */
export const keyOf = (request: FastifyRequest) => request.identity.keyId ?? '-'
