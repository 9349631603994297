import { randomBytes } from 'node:crypto'
import { Type, type Static } from 'typebox'
import { StringEnum } from './primitives.ts'

export const tiers = ['readonly', 'readwrite', 'admin'] as const
export type Tier = (typeof tiers)[number]
export const TierSchema = StringEnum(tiers, { description: 'readonly < readwrite < admin' })

const rank: Record<Tier, number> = { readonly: 0, readwrite: 1, admin: 2 }

/** readonly < readwrite < admin: a higher tier may use the routes of lower ones. */
export function tierAllows(have: Tier, need: Tier): boolean {
  return rank[have] >= rank[need]
}

export function isTier(value: unknown): value is Tier {
  return typeof value === 'string' && value in rank
}

/**
 * Headers the gateway sets on every proxied request. Client-sent copies are
 * stripped at the edge; services trust them only alongside the internal token.
 */
export const identityHeaders = {
  ownerId: 'x-ats-owner-id',
  keyId: 'x-ats-key-id',
  tier: 'x-ats-key-tier',
  /** the wallet bound to the API key (POST /admin/keys `wallet`) */
  wallet: 'x-ats-key-wallet',
  /**
   * the verified x402 payment of a paid request, `<payer>:<nonce>` (both lower-case): the agent
   * ties a job to the payment that bought it and reports the job's outcome for it
   */
  payment: 'x-ats-payment',
  /**
   * the validBefore of that payment (unix seconds, decimal): a job it bought must end while the
   * payment can still be settled, so the agent neither starts nor resumes it too close to this
   */
  paymentValidBefore: 'x-ats-payment-valid-before',
  /**
   * a paid request that may be a repeat (x402 payment id): `<payer>:<payment id>:<nonce of the
   * payment that paid it>`; the same value means the same request, to be answered with the same result
   */
  idempotencyKey: 'x-ats-idempotency-key',
  internalToken: 'x-ats-internal-token',
  requestId: 'x-request-id',
} as const

/**
 * The Idempotency-Key a spend runs under when the client sent none (`gen_` and 24 base64url
 * characters): made by the gateway for its spending groups, and by trading for a spend that
 * reached it without one, and answered in the idempotency-key header so the client can retry with it.
 */
export const generatedIdempotencyKey = (): string => `gen_${randomBytes(18).toString('base64url')}`

export const IdentitySchema = Type.Object({
  ownerId: Type.Optional(Type.String()),
  keyId: Type.Optional(Type.String()),
  tier: Type.Optional(TierSchema),
  wallet: Type.Optional(Type.String()),
  /** from the gateway's x-ats-idempotency-key: a paid request sent again with its payment id */
  idempotencyKey: Type.Optional(Type.String()),
})
export type Identity = Static<typeof IdentitySchema>
