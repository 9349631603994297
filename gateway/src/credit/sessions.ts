// Session tokens: one sign-in serves many credit-paid requests (Authorization: Bearer atcs_…).
import { createHash, randomBytes } from 'node:crypto'
import { cachedLoader, firstLine, replicaAcknowledgement } from '@ats/service-kit'
import type { Redis } from 'ioredis'
import type { Address } from 'viem'
import { CreditUnavailable, SessionInvalid } from '../errors.ts'

/** `atcs_` and 32 base64url characters: told apart from API keys (`atsk_`) by its prefix */
export const sessionTokenPattern = /^atcs_[A-Za-z0-9_-]{32}$/
export const SESSION_TOKEN_HEADER = 'ats-session-token'
export const SESSION_EXPIRES_HEADER = 'ats-session-expires'

export interface Session {
  token: string
  wallet: Address
  /** epoch ms */
  expiresAt: number
}

export interface SessionOptions {
  redis: Redis
  namespace: string
  ttlMs: number
  now?: () => number
}

/**
 * Sessions live in Redis under the SHA-256 of their token (a Redis dump holds no usable token)
 * for `ttlMs`, shared by every gateway; each gateway keeps the ones it has seen in memory until
 * they expire, so a request with a known token costs no Redis call. A session ends only by
 * expiring: there is no revocation (a new sign-in does not end older sessions), which is why the
 * lifetime is short (CREDIT_SESSION_TTL_SECONDS).
 */
export function createSessions({ redis, namespace, ttlMs, now = Date.now }: SessionOptions) {
  // with Sentinel, a session is handed out once a replica holds it: a failover would end it otherwise
  const acknowledgement = replicaAcknowledgement(redis)
  const keyOf = (hash: string) => `ats-credit-session:${namespace}:${hash}`
  const hashOf = (token: string) => createHash('sha256').update(token).digest('hex')
  // keyed by the token itself: a request with a known token costs no hash either
  const known = cachedLoader<string, { wallet: Address; expiresAt: number } | null>({
    max: 100_000,
    ttlMs,
    // an unknown token is remembered for a second: a flood of made-up tokens costs one read each per second at most
    ttlOf: (value) => (value ? value.expiresAt - now() : 1_000),
    now,
    load: async (token) => {
      let stored: string | null
      try {
        stored = await redis.get(keyOf(hashOf(token)))
      } catch (error) {
        throw new CreditUnavailable(`the session store failed: ${firstLine(error)}`)
      }
      if (!stored) return null
      const [wallet, expiresAt] = stored.split(' ')
      return { wallet: wallet as Address, expiresAt: Number(expiresAt) }
    },
  })

  return {
    /** a new session for the wallet, valid for ttlMs */
    async issue(wallet: Address): Promise<Session> {
      const token = `atcs_${randomBytes(24).toString('base64url')}`
      const expiresAt = now() + ttlMs
      try {
        const acknowledged = acknowledgement?.()
        await redis.set(keyOf(hashOf(token)), `${wallet} ${expiresAt}`, 'PX', ttlMs)
        if (acknowledged) await acknowledged()
      } catch (error) {
        throw new CreditUnavailable(`the session store failed: ${firstLine(error)}`)
      }
      known.set(token, { wallet, expiresAt })
      return { token, wallet, expiresAt }
    },
    /** the wallet of a live session, or SessionInvalid (401) */
    async resolve(token: string): Promise<Address> {
      if (!sessionTokenPattern.test(token)) throw new SessionInvalid('malformed session token: atcs_ followed by 32 characters')
      const session = known.peek(token) ?? (await known.get(token))
      if (!session || session.expiresAt <= now()) {
        throw new SessionInvalid('unknown or expired session token: sign in again (POST /credit/session with SIGN-IN-WITH-X)')
      }
      return session.wallet
    },
  }
}

export type Sessions = ReturnType<typeof createSessions>
