// The settings of prepaid credit in the ledger: holds, sweeps, the snapshot's wait, low balance, withdrawals, reconciliation.
import { msSetting } from '@ats/service-kit'
import { Type } from 'typebox'

const ms = (description: string, fallback: number, minimum = 10) => msSetting(description, fallback, minimum, 2_147_483_647)
const usdc = (description: string, fallback: number) =>
  Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER, default: fallback, description })

export const creditSettings = {
  CREDIT_HOLD_TIMEOUT_MS: ms(
    "a hold of metered work with no usage report after this long is released in full and logged (the payer's money moves only for work delivered); keep it above the longest a job can run, approvals included",
    3_600_000,
    1_000,
  ),
  CREDIT_SWEEP_MS: ms(
    'how often the credit ledger looks for settled top-ups, holds past CREDIT_HOLD_TIMEOUT_MS, unpublished adjustments and withdrawals to pick up',
    1_000,
  ),
  CREDIT_SNAPSHOT_WAIT_MS: ms(
    'how long admin.credit.snapshot (and a withdrawal) waits for the ledger to record every debit published before it; past it the answer is 503 and the gateway asks again',
    5_000,
    100,
  ),
  CREDIT_LOW_BALANCE: usdc(
    'a wallet whose available credit falls under this (USDC base units) gets one credit.low webhook event, until it is above it again',
    1_000_000,
  ),
  CREDIT_WITHDRAW_MAX: usdc(
    'the most one POST /credit/withdraw pays back, USDC base units (403 above it, the credit given back)',
    1_000_000_000,
  ),
  CREDIT_WITHDRAW_DAILY_MAX: usdc(
    'the most all withdrawals together pay from the server wallet in one UTC day, USDC base units (403 past it, the credit given back)',
    10_000_000_000,
  ),
  CREDIT_WITHDRAW_RECEIPT_MS: ms(
    'how long POST /credit/withdraw waits for its transfer to be mined before answering 202 (the transfer goes on; a repeat answers how it ended)',
    30_000,
    100,
  ),
  CREDIT_WITHDRAW_LEASE_MS: ms(
    'how long a withdrawal being sent stays with the process sending it; after it another process checks its kept transaction (rebroadcast, or refund if nothing was signed)',
    120_000,
    1_000,
  ),
  CREDIT_RECONCILE_MS: ms(
    "how often each wallet's balance and held are compared with the sum of its ledger entries (drift is logged and counted in ats_credit_drifted_accounts)",
    3_600_000,
    100,
  ),
}
