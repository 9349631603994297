// The settings of admin: the bootstrap key, settlement, the ledger's retries, webhooks, and prepaid credit (credit/settings.ts).
import { apiKeyPattern } from '@ats/contracts'
import { httpUrlSetting, msSetting } from '@ats/service-kit'
import { paymentSettings } from '@ats/wallet'
import { Type } from 'typebox'
import { creditSettings } from './credit/settings.ts'
import { retrySchedulePattern } from './webhooks/retrySchedule.ts'

/** A whole number of something, at least `minimum` (1) and at most `maximum` when given. */
const count = (description: string, fallback: number, maximum?: number, minimum = 1) =>
  Type.Integer({ minimum, ...(maximum === undefined ? {} : { maximum }), default: fallback, description })

export const adminSettings = {
  ADMIN_API_KEY: Type.Optional(
    // the gateway refuses any key not of the key format: another value would lock the operator out
    Type.String({
      pattern: apiKeyPattern.source,
      hint: 'must be an API key: atsk_ followed by 32 characters of A-Z a-z 0-9 _ -; make one with: ADMIN_API_KEY=atsk_$(openssl rand -hex 16)',
      secret: true,
      description: 'bootstrap admin key (atsk_ + 32 base64url characters), seeded (hashed) at start; changing it revokes the previous one',
    }),
  ),
  ...paymentSettings,
  FACILITATOR_URL: Type.Optional(httpUrlSetting({ description: 'x402 facilitator to settle through (POST /settle)' })),
  SETTLEMENT_ENABLED: Type.Boolean({ default: true, description: 'settle recorded payments; false records them as skipped' }),
  SETTLEMENT_INTERVAL_MS: msSetting('how often the settler looks for due payments', 1_000, 50),
  SETTLEMENT_MAX_ATTEMPTS: count('attempts before a payment is marked failed', 5),
  SETTLEMENT_LEASE_MS: msSetting(
    'how long a settler holds a claimed payment; after it, another replica (or a restarted admin) takes it up and checks its kept transaction. Each receipt wait is at most a third of it (60 s at most), and an attempt waits at most twice (its kept transaction, then a new batch), so it ends inside the lease',
    120_000,
    1_000,
    3_600_000,
  ),
  SETTLEMENT_RETRY_MS: msSetting(
    'how long a settlement that failed transiently waits before its first retry; each next wait doubles, up to 60 s',
    1_000,
    100,
    60_000,
  ),
  SETTLEMENT_BATCH_SIZE: count(
    'payments claimed and settled together: on chain, one transaction (Multicall3 aggregate3) for as many as SETTLEMENT_BATCH_GAS allows; through a facilitator, one /settle each, 10 at a time. 1 settles each payment on its own',
    100,
    1_000,
  ),
  SETTLEMENT_BATCH_GAS: count(
    'the most gas one settlement transaction may use (its estimate plus 25%); a batch over it goes as several transactions. Arbitrum One takes up to 32,000,000 a block',
    8_000_000,
    32_000_000,
    200_000,
  ),
  SETTLEMENT_PIPELINE_DEPTH: count(
    'settlement batches in flight at once: the next is signed and broadcast while earlier ones wait for their receipts. 1 waits for each receipt before the next batch',
    4,
    32,
  ),
  LEDGER_RETRY_MS: msSetting(
    'how long a batch of charged payments that could not be recorded waits before it is tried again (3 tries, then the dead letters)',
    2_000,
    100,
    60_000,
  ),
  WEBHOOK_MAX_PER_KEY: count('webhook subscriptions one API key may have (409 past it)', 20, 1000),
  WEBHOOK_SECRET_GRACE_MS: msSetting(
    'how long the old secret of a rotated webhook stays valid; meanwhile deliveries are signed with both',
    86_400_000,
    0,
    30 * 86_400_000,
  ),
  WEBHOOK_CONCURRENCY: count('webhook deliveries one admin replica sends at once', 10, 200),
  WEBHOOK_TIMEOUT_MS: msSetting('how long one webhook delivery attempt may take before it counts as failed', 10_000, 100, 60_000),
  WEBHOOK_POLL_MS: msSetting(
    'how often an admin replica looks for webhook deliveries that are due (retries); a new event wakes it at once',
    500,
    50,
    60_000,
  ),
  WEBHOOK_FANOUT_ACK_WAIT_MS: msSetting(
    'how long an event taken by an admin replica for webhook fan-out stays its own; an event of a replica that died is fanned out by another after it',
    10_000,
    1_000,
    300_000,
  ),
  WEBHOOK_RETRY_SCHEDULE: Type.String({
    pattern: retrySchedulePattern,
    default: '5s,5m,30m,2h,5h,10h,10h',
    hint: 'must be durations like 100ms, 5s, 5m or 2h, comma-separated',
    description:
      'delays between tries of a failed webhook delivery (each ±20% jitter); past the last one the delivery is marked failed. The default spans about a day',
  }),
  WEBHOOK_DISABLE_AFTER_MS: msSetting(
    'a webhook subscription whose deliveries have all failed for this long is disabled (with the reason) when one more fails for good',
    5 * 86_400_000,
    1,
  ),
  WEBHOOK_DELIVERY_RETENTION_DAYS: count(
    'days a webhook delivery that ended (succeeded or failed) stays in the delivery log; older ones are deleted every hour. Pending ones are kept',
    30,
  ),
  WEBHOOK_ALLOW_HTTP: Type.Boolean({ default: false, description: 'development only: allow http:// webhook URLs (otherwise https only)' }),
  WEBHOOK_ALLOW_PRIVATE_ADDRESSES: Type.Boolean({
    default: false,
    description:
      'development only: allow webhook URLs that resolve to loopback, private, link-local or metadata addresses (otherwise refused, also at delivery time)',
  }),
  // prepaid credit (src/credit/settings.ts)
  ...creditSettings,
}
