import { createHash, randomBytes } from 'node:crypto'

/**
 * API keys: `atsk_` + 32 base64url characters (192 random bits). The fixed prefix
 * lets secret scanners find leaked keys (pattern `atsk_[A-Za-z0-9_-]{32}`).
 * Only the SHA-256 of a key is stored or sent between services.
 */
export const apiKeyPrefix = 'atsk_'
export const apiKeyPattern = /^atsk_[A-Za-z0-9_-]{32}$/

export function generateApiKey(): string {
  return apiKeyPrefix + randomBytes(24).toString('base64url')
}

export function hashApiKey(raw: string): string {
  return createHash('sha256').update(raw).digest('hex')
}

/** What a listing shows to tell keys apart: the scheme prefix and 7 more characters (42 bits). */
export function visiblePrefix(raw: string): string {
  return raw.slice(0, apiKeyPrefix.length + 7)
}
