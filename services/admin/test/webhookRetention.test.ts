import { loadConfig, StartupError, type Logger } from '@ats/service-kit'
import { eventually, migratedDatabase } from '@ats/service-kit/testing'
import t, { type Test } from 'tap'
import { adminService } from '../src/service.ts'
import { purgeDeliveries, startDeliveryPurge } from '../src/webhooks/deliveryPurge.ts'

/**
 * The retention purge of webhook deliveries, on a migrated database of its own: which rows go,
 * which stay, and a pass that repeats its batches until nothing old is left.
 */

const day = 86_400_000
const ago = (days: number) => new Date(Date.now() - days * day)

const migratedDb = async (t: Test) => (await migratedDatabase(t, adminService.database!)).db

/** A logger that keeps the info lines, and fails the test on an error line. */
function recordingLog(t: Test) {
  const infos: Array<[unknown, string]> = []
  const quiet = () => {}
  const log = {
    level: 'info',
    fatal: quiet,
    error: (fields: unknown, message: string) => t.fail(`unexpected error log: ${message} ${JSON.stringify(fields)}`),
    warn: quiet,
    info: (fields: unknown, message: string) => infos.push([fields, message]),
    debug: quiet,
    trace: quiet,
    child: () => log,
  } as unknown as Logger
  return { log, infos }
}

t.test('ended deliveries older than the retention are purged in batches; recent ended and pending ones are kept', async (t) => {
  const db = await migratedDb(t)
  const sub = await db.webhookSubscription.create({
    data: {
      id: 'whk_retention',
      keyId: 'key_retention',
      url: 'https://hooks.example.com/ats',
      events: ['job.completed'],
      secret: 'whsec_x',
    },
  })
  let n = 0
  const delivery = (status: string, fields: { createdAt: Date; deliveredAt?: Date; lastTry?: Date; cancelledAt?: Date }) =>
    db.webhookDelivery.create({
      data: {
        id: `whd_${++n}`,
        subscriptionId: sub.id,
        eventId: `evt_${n}`,
        eventType: 'job.completed',
        body: '{}',
        status,
        nextAttemptAt: status === 'pending' ? new Date() : null,
        createdAt: fields.createdAt,
        deliveredAt: fields.deliveredAt ?? null,
        cancelledAt: fields.cancelledAt ?? null,
        cancelReason: fields.cancelledAt ? 'cancelled: key revoked' : null,
        attemptLog: fields.lastTry
          ? [
              { at: fields.lastTry.getTime() - 60_000, durationMs: 5 },
              { at: fields.lastTry.getTime(), durationMs: 5 },
            ]
          : [],
      },
    })

  const purged: string[] = []
  const kept: string[] = []
  // succeeded 40 days ago: five of them, more than two batches of two
  for (let i = 0; i < 5; i++) purged.push((await delivery('succeeded', { createdAt: ago(41), deliveredAt: ago(40) })).id)
  // failed for good 35 days ago (its last try)
  purged.push((await delivery('failed', { createdAt: ago(36), lastTry: ago(35) })).id)
  // failed without a try in its log (none is written so): counted from its creation
  purged.push((await delivery('failed', { createdAt: ago(40) })).id)
  // made 40 days ago, redelivered and succeeded yesterday: it ended yesterday
  kept.push((await delivery('succeeded', { createdAt: ago(40), deliveredAt: ago(1) })).id)
  // made 40 days ago, redelivered and failed for good 2 days ago: it ended then
  kept.push((await delivery('failed', { createdAt: ago(40), lastTry: ago(2) })).id)
  // cancelled 31 days ago (its key was revoked), and one cancelled yesterday after a try 40 days ago
  purged.push((await delivery('cancelled', { createdAt: ago(45), cancelledAt: ago(31) })).id)
  kept.push((await delivery('cancelled', { createdAt: ago(41), lastTry: ago(40), cancelledAt: ago(1) })).id)
  // still being tried after 60 days (a disabled subscription's): pending is never purged
  kept.push((await delivery('pending', { createdAt: ago(60), lastTry: ago(59) })).id)

  const { log, infos } = recordingLog(t)
  // the pause between passes is an hour: everything goes in the first pass, batch after batch
  const purge = startDeliveryPurge({ db, log, retentionDays: 30, batchSize: 2 })
  t.teardown(purge.stop)
  await eventually('the first pass logs what it purged', async () => (infos.length > 0 ? true : undefined))
  const left = await db.webhookDelivery.findMany({ select: { id: true }, orderBy: { id: 'asc' } })
  t.same(
    left.map((row) => row.id),
    [...kept].sort(),
    'only the recent ended and the pending deliveries are left',
  )
  t.same(infos, [[{ purged: purged.length, retentionDays: 30 }, 'old webhook deliveries purged']], 'one line for the whole pass')

  // nothing old left: a pass deletes nothing, and the loop logs nothing for it
  t.equal(await purgeDeliveries(db, 30, 2), 0)
  purge.wake()
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.equal(infos.length, 1, 'a pass that purged nothing logs nothing')
  await purge.stop()
})

t.test('WEBHOOK_DELIVERY_RETENTION_DAYS is a whole number of days, at least 1 (30 by default)', async (t) => {
  const settings = { WEBHOOK_DELIVERY_RETENTION_DAYS: adminService.settings!.WEBHOOK_DELIVERY_RETENTION_DAYS }
  t.equal(loadConfig(settings, {}).WEBHOOK_DELIVERY_RETENTION_DAYS, 30)
  t.equal(loadConfig(settings, { WEBHOOK_DELIVERY_RETENTION_DAYS: '7' }).WEBHOOK_DELIVERY_RETENTION_DAYS, 7)
  for (const bad of ['0', '-1', 'forever']) {
    const error = t.throws(() => loadConfig(settings, { WEBHOOK_DELIVERY_RETENTION_DAYS: bad })) as Error
    t.type(error, StartupError, `${bad} is refused at start`)
    t.match(error.message, /WEBHOOK_DELIVERY_RETENTION_DAYS/)
  }
})
