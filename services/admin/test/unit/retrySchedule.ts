import { loadConfig, StartupError } from '@ats/service-kit'
import t from 'tap'
import { adminService } from '../../src/service.ts'
import { nextDelayMs, parseDuration, parseRetrySchedule } from '../../src/webhooks/retrySchedule.ts'

t.test('durations read as 100ms, 5s, 5m and 2h', async (t) => {
  t.same(['100ms', '5s', '5m', '2h', ' 7s '].map(parseDuration), [100, 5_000, 300_000, 7_200_000, 7_000])
  for (const bad of ['5', '5d', 's', '-5s', '1.5s', '']) t.throws(() => parseDuration(bad), { message: /is not a duration/ }, bad)
})

t.test('the default retry schedule spans about a day over 8 tries', async (t) => {
  const { WEBHOOK_RETRY_SCHEDULE } = loadConfig({ WEBHOOK_RETRY_SCHEDULE: adminService.settings!.WEBHOOK_RETRY_SCHEDULE }, {})
  const schedule = parseRetrySchedule(WEBHOOK_RETRY_SCHEDULE)
  t.equal(schedule.length + 1, 8, 'a first try and 7 retries')
  const hours = schedule.reduce((a, b) => a + b, 0) / 3_600_000
  t.ok(hours > 20 && hours < 30, `${hours} h`)
  t.throws(() => parseRetrySchedule('5s,0s'), { message: /more than 0/ })
})

t.test('each retry waits its delay within ±20%, and there is none past the schedule', async (t) => {
  const schedule = [1_000, 60_000]
  t.equal(
    nextDelayMs(schedule, 1, () => 0),
    800,
  )
  t.equal(
    nextDelayMs(schedule, 1, () => 0.5),
    1_000,
  )
  t.equal(
    nextDelayMs(schedule, 2, () => 0.999999),
    72_000,
  )
  t.equal(
    nextDelayMs(schedule, 3, () => 0.5),
    undefined,
    'the third failure is the last',
  )
})

t.test('a bad WEBHOOK_RETRY_SCHEDULE stops admin at start, naming it', async (t) => {
  const settings = { WEBHOOK_RETRY_SCHEDULE: adminService.settings!.WEBHOOK_RETRY_SCHEDULE }
  const error = t.throws(() => loadConfig(settings, { WEBHOOK_RETRY_SCHEDULE: '5s,1 day' })) as Error
  t.type(error, StartupError)
  t.match(error.message, /^invalid setting WEBHOOK_RETRY_SCHEDULE: must be durations like 100ms, 5s, 5m or 2h, comma-separated/)
  t.equal(loadConfig(settings, { WEBHOOK_RETRY_SCHEDULE: '100ms, 5s' }).WEBHOOK_RETRY_SCHEDULE, '100ms, 5s')
})
