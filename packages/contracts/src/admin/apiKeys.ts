import { hash } from 'node:crypto'

/**
 * The API-key format: `atsk_` + 32 base64url characters (192 random bits). The fixed prefix
 * lets secret scanners find leaked keys (pattern `atsk_[A-Za-z0-9_-]{32}`); the gateway
 * refuses anything else before asking admin. Only the SHA-256 of a key is stored or sent
 * between services.
 */
export const apiKeyPrefix = 'atsk_'
export const apiKeyPattern = /^atsk_[A-Za-z0-9_-]{32}$/

/** One-shot (no Hash object): it runs for every keyed request at the gateway. */
export function hashApiKey(raw: string): string {
  return hash('sha256', raw, 'hex')
}
