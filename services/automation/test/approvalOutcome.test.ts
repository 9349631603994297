import type { Approval, SwapResult } from '@ats/contracts'
import t from 'tap'
import { approvalOutcome } from '../src/approvals.ts'

const createdAt = Date.UTC(2026, 11, 1, 12)
const approval = (fields: Partial<Approval>): Approval => ({
  id: 'apr_1',
  status: 'pending',
  reason: 'this swap is worth $20.00, over the approval threshold of $10.00 set by the spend policy of key key_a',
  swap: { tokenIn: 'USDC', tokenOut: 'ARB', tokenInAddress: '0x1', tokenOutAddress: '0x2', amountIn: '20000000', dex: 'uniswap', slippageBps: 50, recipient: null },
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
  t.same(approvalOutcome('apr_1', approval({ status: 'expired' })), { kind: 'skipped', reason: 'not swapped: approval apr_1 expired after 15 minutes' })
  t.same(approvalOutcome('apr_1', approval({ status: 'rejected', decidedBy: 'key_b', decisionReason: 'too much today' })), {
    kind: 'skipped',
    reason: 'not swapped: approval apr_1 was rejected by key_b: too much today',
  })
  t.same(approvalOutcome('apr_1', approval({ status: 'rejected', decidedBy: 'requester' })), { kind: 'skipped', reason: 'not swapped: approval apr_1 was rejected (withdrawn)' })
})

t.test('an approval trading does not know fails the run', async (t) => {
  t.same(approvalOutcome('apr_9', null), { kind: 'finished', outcome: { ok: false, error: 'not swapped: trading does not know approval apr_9' } })
})
