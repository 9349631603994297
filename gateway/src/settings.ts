// The gateway's settings: the services' addresses, rate and concurrency limits, timeouts, proxy trust, x402 payments, prepaid credit.
import { isIP } from 'node:net'
import { addressPattern } from '@ats/contracts'
import { httpUrlSetting, msSetting } from '@ats/service-kit'
import { paymentSettings } from '@ats/wallet'
import { Type } from 'typebox'
import { isAddress } from 'viem'

const url = (fallback: string, what: string) => httpUrlSetting({ default: fallback, description: `base URL of the ${what} service` })
/** A whole-number setting, as msSetting is for durations. */
const integer = (description: string, fallback: number, minimum = 1, maximum?: number) =>
  Type.Integer({ minimum, ...(maximum === undefined ? {} : { maximum }), default: fallback, description })
const perWindow = (fallback: number, tier: string) => integer(`requests per window for a ${tier} key`, fallback)

export const gatewaySettings = {
  AGENT_URL: url('http://127.0.0.1:3001', 'agent'),
  TRADING_URL: url('http://127.0.0.1:3002', 'trading'),
  MARKET_DATA_URL: url('http://127.0.0.1:3003', 'market-data'),
  AUTOMATION_URL: url('http://127.0.0.1:3004', 'automation'),
  ADMIN_URL: url('http://127.0.0.1:3005', 'admin'),
  RATE_LIMIT_WINDOW_MS: msSetting('rate-limit window', 60_000, 1000),
  RATE_LIMIT_READONLY: perWindow(1200, 'readonly'),
  RATE_LIMIT_READWRITE: perWindow(1200, 'readwrite'),
  RATE_LIMIT_ADMIN: perWindow(300, 'admin'),
  AUTH_FAILURE_LIMIT: integer(
    'failures no one can be named for (malformed, unknown or revoked keys; payment headers that cannot be read, signatures that do not verify, payers holding less than one payment) per client address per rate-limit window before it gets 429 for unknown keys and on paid routes; high enough for a shared egress (NAT, an agent platform)',
    300,
  ),
  PAYER_FAILURE_LIMIT: integer(
    'refused payments of one payer (signature verified: replays, funds held by unsettled payments, a blocked payer) per rate-limit window before that payer gets 429 on paid routes; they never count against the client address',
    300,
  ),
  PAID_RATE_LIMIT_PER_ADDRESS: integer(
    'paid-route requests (/agent/*) per client address per rate-limit window, counted before any payment check',
    1200,
  ),
  PAID_RATE_LIMIT_PER_PAYER: integer('paid-route requests per payer per rate-limit window, counted once the payment is verified', 1200),
  MAX_CONCURRENT_PER_ADDRESS: integer('requests one client address may have in flight at once on this gateway; more get 429', 256),
  MAX_CONCURRENT_PER_KEY: integer('requests one API key may have in flight at once on this gateway; more get 429', 64),
  SERVER_HEADERS_TIMEOUT_MS: msSetting(
    "how long a client may take to send a request's headers; then 408 and the connection closes",
    15_000,
  ),
  SERVER_REQUEST_TIMEOUT_MS: msSetting(
    'how long a client may take to send a whole request, headers and body (at least SERVER_HEADERS_TIMEOUT_MS); then 408 and the connection closes',
    30_000,
  ),
  SERVER_KEEP_ALIVE_TIMEOUT_MS: msSetting(
    "how long an idle keep-alive connection stays open (above a load balancer's idle timeout, 60 s on most)",
    72_000,
  ),
  UPSTREAM_CONNECTIONS: integer('connections the gateway opens to each service per route group', 128),
  TRUST_PROXY: Type.Refine(
    Type.String({
      default: 'false',
      description: 'whose X-Forwarded-For to believe for the client address: false, true, a hop count, or comma-separated addresses/CIDRs',
    }),
    (value) => trustProxyProblem(value) === undefined,
    (value) => trustProxyProblem(value) ?? 'not valid',
  ),
  KEY_CACHE_TTL_MS: msSetting('how long a verified key is cached; revocations evict at once by broadcast', 60_000, 0),
  UPSTREAM_TIMEOUT_MS: msSetting('how long the gateway waits for a service', 30_000),
  SPEND_TIMEOUT_MS: msSetting(
    "how long the gateway waits for /swap/execute and /launchpad, which send from the server wallet and wait for receipts: keep it above trading's worst case, 2 x RECEIPT_TIMEOUT_MS (an approval's receipt, then the swap's) plus about a minute for the policy lookup, quotes and the wallet lock (2 x 60 s + 60 s by default); at least UPSTREAM_TIMEOUT_MS",
    180_000,
    1_000,
  ),
  CHAT_TIMEOUT_MS: msSetting(
    "how long the gateway waits for a /v1 answer, which runs a whole agent job (keep it above the agent's AGENT_CHAT_WAIT_MS)",
    180_000,
    1_000,
  ),
  PAY_TO: Type.Optional(
    // a mixed-case address must carry a valid checksum (EIP-55): viem refuses it otherwise
    Type.Refine(
      Type.String({ pattern: addressPattern, description: 'address x402 payments go to; unset: paid routes answer 503' }),
      (value) => isAddress(value),
      () => 'must be a 0x address whose mixed case is a valid EIP-55 checksum (or all lower case)',
    ),
  ),
  ...paymentSettings,
  PAYMENT_TIMEOUT_SECONDS: integer(
    "maxTimeoutSeconds offered in 402 answers: clients sign validBefore = now + this. A prompt's payment settles only once its job completes, so keep it above the agent's longest job: AGENT_MAX_ATTEMPTS x (AGENT_JOB_MAX_RUN_MS + AGENT_ACK_WAIT_MS) plus a margin (3 x (120 + 30) s = 450 s by default); a job that outlives it is not charged",
    600,
    10,
  ),
  JOB_PAYMENT_MIN_VALIDITY_SECONDS: Type.Optional(
    Type.Integer({
      minimum: 10,
      description:
        'how long a POST /agent/prompt payment must still be valid when it arrives (validBefore >= now + this): it settles only when its job completes, so a shorter window would buy a job for free; below PAYMENT_TIMEOUT_SECONDS (unset: half of it)',
    }),
  ),
  PAYMENT_MIN_VALIDITY_SECONDS: integer(
    'how long every payment must still be valid when it arrives (validBefore > now + this), so that it can still be settled after the answer; below PAYMENT_TIMEOUT_SECONDS (a prompt needs JOB_PAYMENT_MIN_VALIDITY_SECONDS, usually more)',
    60,
    10,
  ),
  PAYMENT_ID_TTL_SECONDS: integer(
    'how long a payment id (x402 payment-identifier) and its first answer are remembered: a repeat within it gets that answer again and is not charged (at most 24 h: the agent keeps job keys 48 h)',
    86_400,
    60,
    86_400,
  ),
  PAYMENT_ID_ANSWER_MAX_BYTES: integer(
    'the largest answer body kept in Redis for repeats of a paid request with a payment id (for PAYMENT_ID_TTL_SECONDS); a larger answer is given once and its repeats are refused with 409',
    65_536,
    1_024,
    4_194_304,
  ),
  CREDIT_MIN_TOPUP: integer(
    'the smallest top-up of prepaid credit, USDC base units (1000000 = 1 USDC): POST /credit/topup?amount= below it answers 400',
    1_000_000,
  ),
  CREDIT_MAX_TOPUP: integer(
    'the largest top-up of prepaid credit in one payment, USDC base units (at least CREDIT_MIN_TOPUP)',
    1_000_000_000,
  ),
  CREDIT_METERED_HOLD: integer(
    'what a credit-paid metered request (a /v1 completion, POST /agent/prompt) holds from the credit while it runs, USDC base units: the most it may cost; the service reports what it used and the rest comes back',
    100_000,
  ),
  CREDIT_SESSION_TTL_SECONDS: integer(
    'how long a session token (Authorization: Bearer atcs_…, from one sign-in with a wallet) pays with its credit; sessions end only by expiring',
    900,
    60,
    86_400,
  ),
  CREDIT_SIGN_IN_TTL_SECONDS: integer(
    "how long the sign-in challenge of a 402 (extensions['sign-in-with-x']) may be answered",
    300,
    30,
    3_600,
  ),
  SKIP_PAYMENT: Type.Boolean({ default: false, description: 'development only: paid routes pass without a verified payment' }),
  PUBLIC_URL: Type.Optional(
    Type.String({
      pattern: '^https?://[^/]+$',
      description: 'the gateway as clients reach it (scheme and host, no path), for the resource URL of 402 answers',
    }),
  ),
  CHAIN_NAME: Type.String({ default: 'arbitrum-one', description: 'chain name shown by GET /' }),
}

/** proxy-addr's names of address ranges, accepted in TRUST_PROXY lists */
const proxyRanges = new Set(['loopback', 'linklocal', 'uniquelocal'])

/** What is wrong with a TRUST_PROXY value ("yes" used to stop the gateway with proxy-addr's own error). */
function trustProxyProblem(value: string): string | undefined {
  if (value === 'true' || value === 'false' || /^[0-9]+$/.test(value)) return undefined
  const bad = value
    .split(',')
    .map((item) => item.trim())
    .find((item) => {
      const [address = '', bits, ...rest] = item.split('/')
      return !(proxyRanges.has(item) || (isIP(address) !== 0 && rest.length === 0 && (bits === undefined || /^[0-9]{1,3}$/.test(bits))))
    })
  return bad === undefined
    ? undefined
    : `must be false, true, a hop count, or comma-separated addresses/CIDRs (${JSON.stringify(bad)} is none of them)`
}

/** TRUST_PROXY as Fastify's trustProxy option. */
export function trustProxyOf(value: string): boolean | number | string {
  if (value === 'true' || value === 'false') return value === 'true'
  return /^[0-9]+$/.test(value) ? Number(value) : value
}
