// The settings of automation: its scheduler's tick, batch, leases and retries, stop orders' price checks, the limits of automations, approval polling.
import { msSetting } from '@ats/service-kit'
import { Type } from 'typebox'

/** A whole number of something, from 1 to `maximum`. */
const count = (description: string, fallback: number, maximum: number) =>
  Type.Integer({ minimum: 1, maximum, default: fallback, description })

export const automationSettings = {
  AUTOMATION_SCHEDULER: Type.Boolean({ default: true, description: 'run the scheduler in this process (false: routes only)' }),
  AUTOMATION_TICK_MS: msSetting('how often the scheduler looks for due automations', 1_000, 50),
  AUTOMATION_BATCH: count('due automations one tick takes at most', 50, 1000),
  AUTOMATION_MIN_INTERVAL_MS: msSetting('the shortest interval (and limit-order checkEvery) an automation may have', 60_000, 1_000),
  AUTOMATION_TRIGGER_CHECK_MS: msSetting(
    "how often a stop-loss, take-profit or trailing stop reads its token's price from market-data (one read per tick for all of them, no quote)",
    5_000,
    100,
  ),
  AUTOMATION_PRICE_MAX_AGE_MS: msSetting(
    "a stop order never fires on a price older than this (market-data's updatedAt: when it read the price from its source); keep it above market-data's MARKET_CACHE_TTL_MS",
    60_000,
    1_000,
  ),
  AUTOMATION_LEASE_MS: msSetting(
    'a run its scheduler has not finished by then (it died) is resumed by another, with the same idempotency key',
    120_000,
    1_000,
  ),
  AUTOMATION_MAX_FAILURES: count('failed runs in a row before an automation fails', 3, 100),
  AUTOMATION_MAX_ATTEMPTS: count('tries of one run whose swap timed out before the run fails', 5, 20),
  AUTOMATION_EXECUTE_TIMEOUT_MS: msSetting("how long a run waits for trading's swap (mined)", 90_000, 1_000),
  AUTOMATION_MAX_PER_KEY: count(
    'active or paused automations one API key (or agent payer) may have; creating or resuming one more answers 409',
    10,
    10_000,
  ),
  APPROVAL_POLL_MS: msSetting('how often the scheduler asks trading whether the approval a run waits for was decided', 2_000),
}
