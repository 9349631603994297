import { randomBytes } from 'node:crypto'
import { apiKeyPrefix } from '@ats/contracts'

/** Making API keys, in the format the contracts fix (`atsk_` + 32 base64url characters). */
export function generateApiKey(): string {
  return apiKeyPrefix + randomBytes(24).toString('base64url')
}

/** What a listing shows to tell keys apart: the scheme prefix and 7 more characters (42 bits). */
export function visiblePrefix(raw: string): string {
  return raw.slice(0, apiKeyPrefix.length + 7)
}
