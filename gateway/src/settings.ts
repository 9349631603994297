import { addressPattern } from '@ats/contracts'
import { paymentSettings } from '@ats/service-kit'
import { Type } from 'typebox'

const url = (fallback: string, what: string) => Type.String({ default: fallback, description: `base URL of the ${what} service` })
const perWindow = (fallback: number, tier: string) =>
  Type.Integer({ minimum: 1, default: fallback, description: `requests per window for a ${tier} key` })

export const gatewaySettings = {
  AGENT_URL: url('http://127.0.0.1:3001', 'agent'),
  TRADING_URL: url('http://127.0.0.1:3002', 'trading'),
  MARKET_DATA_URL: url('http://127.0.0.1:3003', 'market-data'),
  AUTOMATION_URL: url('http://127.0.0.1:3004', 'automation'),
  ADMIN_URL: url('http://127.0.0.1:3005', 'admin'),
  RATE_LIMIT_WINDOW_MS: Type.Integer({ minimum: 1000, default: 60_000, description: 'rate-limit window' }),
  RATE_LIMIT_READONLY: perWindow(1200, 'readonly'),
  RATE_LIMIT_READWRITE: perWindow(1200, 'readwrite'),
  RATE_LIMIT_ADMIN: perWindow(300, 'admin'),
  AUTH_FAILURE_LIMIT: Type.Integer({
    minimum: 1,
    default: 30,
    description: 'failed authentications per client address per rate-limit window before it gets 429 for unknown keys',
  }),
  TRUST_PROXY: Type.String({
    default: 'false',
    description: 'whose X-Forwarded-For to believe for the client address: false, true, a hop count, or comma-separated addresses/CIDRs',
  }),
  KEY_CACHE_TTL_MS: Type.Integer({
    minimum: 0,
    default: 60_000,
    description: 'how long a verified key is cached; revocations evict at once by broadcast',
  }),
  UPSTREAM_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 30_000, description: 'how long the gateway waits for a service' }),
  CHAT_TIMEOUT_MS: Type.Integer({
    minimum: 1_000,
    default: 180_000,
    description: 'how long the gateway waits for a /v1 answer, which runs a whole agent job (keep it above the agent\'s AGENT_CHAT_WAIT_MS)',
  }),
  PAY_TO: Type.Optional(
    Type.String({ pattern: addressPattern, description: 'address x402 payments go to; unset: paid routes answer 503' }),
  ),
  ...paymentSettings,
  PAYMENT_TIMEOUT_SECONDS: Type.Integer({ minimum: 10, default: 60, description: 'maxTimeoutSeconds offered in 402 answers' }),
  SKIP_PAYMENT: Type.Boolean({ default: false, description: 'development only: paid routes pass without a verified payment' }),
  PUBLIC_URL: Type.Optional(
    Type.String({ pattern: '^https?://[^/]+$', description: 'the gateway as clients reach it (scheme and host, no path), for the resource URL of 402 answers' }),
  ),
  CHAIN_NAME: Type.String({ default: 'arbitrum-one', description: 'chain name shown by GET /' }),
}

/** TRUST_PROXY as Fastify's trustProxy option. */
export function trustProxyOf(value: string): boolean | number | string {
  if (value === 'true' || value === 'false') return value === 'true'
  return /^[0-9]+$/.test(value) ? Number(value) : value
}
