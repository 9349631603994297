import t from 'tap'
import { resumeRunAt, type LimitOrder, type RecurringBuy } from '../src/types.ts'

const hourly: RecurringBuy = { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1', slippageBps: 50, interval: '1h' }
const hour = 3_600_000
const now = Date.UTC(2026, 10, 25, 12, 20)

t.test('a resume within the interval keeps the due time the pause left', async (t) => {
  t.equal(resumeRunAt(hourly, now + 40 * 60_000, now), now + 40 * 60_000)
})

t.test('a resume after the due time passed waits for the next time of the same schedule, never now', async (t) => {
  const anchor = now - 20 * 60_000
  t.equal(resumeRunAt(hourly, anchor, now), anchor + hour, 'one interval on, same phase')
  t.equal(resumeRunAt(hourly, anchor - 5 * hour, now), anchor + hour, 'five missed times are skipped, not caught up')
  t.equal(resumeRunAt(hourly, now, now), now + hour, 'a due time of exactly now is not run at once')
})

t.test('a cron schedule resumes at its next time after now', async (t) => {
  const daily: RecurringBuy = { ...hourly, interval: '0 9 * * *' }
  t.equal(resumeRunAt(daily, now - 2 * 24 * hour, now), Date.UTC(2026, 10, 26, 9))
})

t.test('without a kept due time (paused before, or failed) the next run is an interval from now', async (t) => {
  t.equal(resumeRunAt(hourly, null, now), now + hour)
  const order: LimitOrder = { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1', slippageBps: 50, minAmountOut: '1', checkEvery: '5m' }
  t.equal(resumeRunAt(order, null, now), now + 5 * 60_000)
})
