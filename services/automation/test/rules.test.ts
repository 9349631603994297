// The scheduler's rules as pure functions, no infrastructure: what the state of an approval means
// for the run that waits for it (approvalOutcome), when a resumed automation runs next
// (resumeRunAt), and what orders decide (a trailing stop's level, a TWAP's slices, when it is over).
import type { Approval, SwapResult } from '@ats/contracts'
import t from 'tap'
import { IdempotencyInProgress, ServiceCallError } from '@ats/service-kit'
import { approvalOutcome } from '../src/scheduler/approvals.ts'
import { swapStillInFlight } from '../src/scheduler/scheduler.ts'
import { afterSlice, nextSlice, overReason, twapStart, watchStop } from '../src/automations/orders.ts'
import { resumeRunAt, type LimitOrder, type RecurringBuy, type Twap } from '../src/automations/types.ts'

// approvalOutcome: a run waiting for a person's approval
const createdAt = Date.UTC(2026, 11, 1, 12)
const approval = (fields: Partial<Approval>): Approval => ({
  id: 'apr_1',
  status: 'pending',
  reason: 'this swap is worth $20.00, over the approval threshold of $10.00 set by the spend policy of key key_a',
  swap: {
    tokenIn: 'USDC',
    tokenOut: 'ARB',
    tokenInAddress: '0x1',
    tokenOutAddress: '0x2',
    amountIn: '20000000',
    dex: 'uniswap',
    slippageBps: 50,
    recipient: null,
  },
  quote: { amountOut: '1', amountOutMinimum: '1', priceImpactBps: 1, usdValue: 20, blockNumber: '1' },
  policy: { owner: 'key key_a', approvalAboveUsd: 10 },
  requestedBy: { keyId: 'key_a', ownerId: null, jobId: null, automationRunId: 'run_1' },
  createdAt,
  expiresAt: createdAt + 15 * 60_000,
  decidedAt: null,
  decidedBy: null,
  decisionReason: null,
  result: null,
  error: null,
  links: { approve: '/approvals/apr_1/approve', reject: '/approvals/apr_1/reject', self: '/approvals/apr_1' },
  ...fields,
})
const hash = `0x${'ab'.repeat(32)}`
const mined = (success: boolean) => ({ success, hash, amountOut: success ? '42' : '0', executionId: 'exe_1' }) as SwapResult

t.test('a pending approval, or an approved swap not yet mined, keeps the run waiting', async (t) => {
  t.same(approvalOutcome('apr_1', approval({})), { kind: 'waiting' })
  t.same(approvalOutcome('apr_1', approval({ status: 'approved', decidedBy: 'key_a' })), { kind: 'waiting' })
})

t.test('an approved and mined swap makes the run succeed with its hash', async (t) => {
  t.same(approvalOutcome('apr_1', approval({ status: 'approved', result: mined(true) })), {
    kind: 'finished',
    outcome: { ok: true, txHash: hash, amountOut: '42', executionId: 'exe_1' },
  })
})

t.test('an approved swap that reverted, or could not be made, fails the run saying why', async (t) => {
  t.same(approvalOutcome('apr_1', approval({ status: 'approved', result: mined(false) })), {
    kind: 'finished',
    outcome: { ok: false, error: 'the approved swap reverted on chain', txHash: hash, executionId: 'exe_1' },
  })
  t.same(approvalOutcome('apr_1', approval({ status: 'approved', error: 'over the key maxUsdPerDay' })), {
    kind: 'finished',
    outcome: { ok: false, error: 'not swapped: approval apr_1 was approved, but over the key maxUsdPerDay' },
  })
})

t.test('a rejected, withdrawn or expired approval skips the run, saying nothing was swapped and why', async (t) => {
  t.same(approvalOutcome('apr_1', approval({ status: 'expired' })), {
    kind: 'skipped',
    reason: 'not swapped: approval apr_1 expired after 15 minutes',
  })
  t.same(approvalOutcome('apr_1', approval({ status: 'rejected', decidedBy: 'key_b', decisionReason: 'too much today' })), {
    kind: 'skipped',
    reason: 'not swapped: approval apr_1 was rejected by key_b: too much today',
  })
  t.same(approvalOutcome('apr_1', approval({ status: 'rejected', decidedBy: 'requester' })), {
    kind: 'skipped',
    reason: 'not swapped: approval apr_1 was rejected (withdrawn)',
  })
})

t.test('an approval trading does not know fails the run', async (t) => {
  t.same(approvalOutcome('apr_9', null), {
    kind: 'finished',
    outcome: { ok: false, error: 'not swapped: trading does not know approval apr_9' },
  })
})

// resumeRunAt: the due time of a resumed automation

const hourly: RecurringBuy = { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1', slippageBps: 50, interval: '1h' }
const hour = 3_600_000
// a stop order's check interval (AUTOMATION_TRIGGER_CHECK_MS): not used by these types
const checkMs = 5_000
const now = Date.UTC(2026, 10, 25, 12, 20)

t.test('a resume within the interval keeps the due time the pause left', async (t) => {
  t.equal(resumeRunAt(hourly, now + 40 * 60_000, now, checkMs), now + 40 * 60_000)
})

t.test('a resume after the due time passed waits for the next time of the same schedule, never now', async (t) => {
  const anchor = now - 20 * 60_000
  t.equal(resumeRunAt(hourly, anchor, now, checkMs), anchor + hour, 'one interval on, same phase')
  t.equal(resumeRunAt(hourly, anchor - 5 * hour, now, checkMs), anchor + hour, 'five missed times are skipped, not caught up')
  t.equal(resumeRunAt(hourly, now, now, checkMs), now + hour, 'a due time of exactly now is not run at once')
})

t.test('a cron schedule resumes at its next time after now', async (t) => {
  const daily: RecurringBuy = { ...hourly, interval: '0 9 * * *' }
  t.equal(resumeRunAt(daily, now - 2 * 24 * hour, now, checkMs), Date.UTC(2026, 10, 26, 9))
})

t.test('without a kept due time (paused before, or failed) the next run is an interval from now', async (t) => {
  t.equal(resumeRunAt(hourly, null, now, checkMs), now + hour)
  const order: LimitOrder = { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1', slippageBps: 50, minAmountOut: '1', checkEvery: '5m' }
  t.equal(resumeRunAt(order, null, now, checkMs), now + 5 * 60_000)
})

// orders: a trailing stop by an amount, a TWAP's slices

t.test('a trailing stop by an amount: its stop follows the highest price, never down; it fires at the stop', async (t) => {
  const order = { tokenIn: 'WETH', tokenOut: 'USDC', amount: '1', slippageBps: 50, trailAmount: 150 }
  const seen = (price: number) => ({ asset: 'ETH', price, at: now })
  let { state } = watchStop('trailing-stop', order, null, seen(3000))
  t.match(state, { highestPrice: 3000, stopPrice: 2850 })
  ;({ state } = watchStop('trailing-stop', order, state, seen(3200)))
  t.match(state, { highestPrice: 3200, stopPrice: 3050 })
  const lower = watchStop('trailing-stop', order, state, seen(3051))
  t.match(lower, { state: { highestPrice: 3200, stopPrice: 3050, price: 3051 } })
  t.notOk(lower.fired, 'above the stop: no sale')
  t.match(watchStop('trailing-stop', order, state, seen(3050)).fired, {
    kind: 'trailing-stop',
    threshold: 3050,
    detail: 'trailing-stop: ETH at 3050 USD, at or below 3050, 150 USD under its highest 3200',
  })
})

t.test(
  "a TWAP's slices: equal shares, the last takes the rest; a skipped slice carried or dropped; over after the last or the window",
  async (t) => {
    const twap: Twap = {
      tokenIn: 'USDC',
      tokenOut: 'WETH',
      amount: '100',
      slippageBps: 50,
      duration: '3m',
      slices: 3,
      sliceMs: 60_000,
      maxImpactBps: 100,
      remainder: 'carry',
    }
    let state = twapStart(twap, now)
    t.equal(state.windowEndsAt, now + 180_000)
    t.match(nextSlice(twap, state), { amountIn: '33', trigger: { kind: 'twap-slice', slice: 1, slices: 3, detail: 'slice 1 of 3' } })
    state = afterSlice(twap, state, '33', false)
    t.match(nextSlice(twap, state), {
      amountIn: '66',
      trigger: { slice: 2, detail: 'slice 2 of 3 (with 33 base units carried from skipped slices)' },
    })
    t.equal(afterSlice({ ...twap, remainder: 'drop' }, state, '33', false).carried, '0', 'dropped: nothing carried')
    state = afterSlice(twap, state, '66', true)
    t.match(state, { slicesDone: 2, filled: '66', carried: '0', skipped: 1 })
    t.match(nextSlice(twap, state), { amountIn: '34', trigger: { slice: 3 } })
    const automation = { type: 'twap', config: twap, runs: 1, state }
    t.equal(overReason(automation, now), undefined)
    t.equal(
      overReason(automation, now + 180_000),
      "the TWAP's window ended: filled 66 of 100 USDC base units (1 of 3 slices swapped, 1 not)",
    )
    state = afterSlice(twap, state, '34', true)
    t.equal(
      overReason({ ...automation, state }, now),
      'the TWAP made its 3 slices: filled 100 of 100 USDC base units (2 of 3 slices swapped, 1 not)',
    )
  },
)

t.test("swapStillInFlight: trading's 409 for a key whose swap is still being made is not a failure; other refusals are", async (t) => {
  const subject = 'ats.trading.swap.execute'
  t.ok(swapStillInFlight(new ServiceCallError(subject, 409, new IdempotencyInProgress().message)), 'still in progress: retried')
  t.notOk(swapStillInFlight(new ServiceCallError(subject, 409, 'the grant allows 10 USDC a day; 12 asked')), 'a grant refusal')
  t.notOk(swapStillInFlight(new ServiceCallError(subject, 422, new IdempotencyInProgress().message)), 'another status')
  t.notOk(swapStillInFlight(new Error(new IdempotencyInProgress().message)), 'not an answer of trading')
})
