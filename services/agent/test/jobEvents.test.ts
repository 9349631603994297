// The safety net of the job event streams: a broadcast that never arrives (a lost publish, a
// NATS reconnect) is found by one read of the store for all the streams of a process, every
// poll interval and at once after a reconnect; the reads do not grow with the streams.
import { natsChannels, type JobBroadcast } from '@ats/contracts'
import pino from 'pino'
import { baseTestEnv, startService } from '@ats/service-kit/testing'
import { connect } from 'nats'
import t, { type Test } from 'tap'
import { createJobEvents } from '../src/jobs/events.ts'
import { createJobStore } from '../src/jobs/store.ts'
import { agentService } from '../src/service.ts'

const log = pino({ level: 'silent' })
const owner = { ownerId: '0x00000000000000000000000000000000000000e1' }

/** An agent API's database and a job event hub of the test's own, whose store reads are counted (jobs per read). */
async function setUp(t: Test, pollMs: number) {
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), AGENT_ROLE: 'api' }
  const svc = await startService(t, agentService, env)
  const store = createJobStore(svc.ctx.db)
  // a reconnect to the same server waits reconnectTimeWait first (2 s by default)
  const nc = await connect({ servers: env.NATS_URL!, reconnectTimeWait: 100 })
  t.teardown(() => nc.close())
  const reads: number[] = []
  const counted = {
    eventsOfJobs: (after: ReadonlyMap<string, number>) => {
      reads.push(after.size)
      return store.eventsOfJobs(after)
    },
  }
  const events = createJobEvents({ nc, channels: natsChannels(env.NATS_NAMESPACE!).agent, store: counted, log, pollMs })
  t.teardown(() => events.closeAll())
  /** a pending job followed from its start: what it delivered, and when it ended */
  const follow = async () => {
    const { jobId } = await store.createPrompt(owner, { prompt: 'price of ETH' })
    const seen: JobBroadcast[] = []
    const following = events.watch(jobId, 0, false, (e) => seen.push(e))
    return { jobId, seen, ended: following.ended.then((jobEnded) => ({ jobEnded, at: performance.now() })) }
  }
  /** ends the job in the store only: its broadcast is never sent */
  const cancelSilently = async (jobId: string) => {
    const ended = await store.cancel(owner, jobId)
    if (!ended) throw new Error(`job ${jobId} could not be cancelled`)
    return ended.event
  }
  const settle = async (count: number) => {
    for (let i = 0; i < 200 && reads.length < count; i++) await new Promise((r) => setTimeout(r, 10))
  }
  return { nc, events, reads, follow, cancelSilently, settle }
}

const statuses = (seen: JobBroadcast[]) => seen.map((e) => (e.type === 'status' ? (e.data as { status: string }).status : e.type))

t.test('a stream whose final broadcast was missed still ends with the final event within one poll interval', async (t) => {
  const pollMs = 300
  const { follow, cancelSilently, settle } = await setUp(t, pollMs)
  const job = await follow()
  await settle(1)
  const cancelledAt = performance.now()
  await cancelSilently(job.jobId)
  const { jobEnded, at } = await job.ended
  t.ok(jobEnded, 'ended with the job')
  t.same(statuses(job.seen), ['pending', 'cancelled'])
  // without the shared catch-up it would never end (no broadcast); the bound is loose for loaded machines
  t.ok(at - cancelledAt < 5_000, `ended ${(at - cancelledAt).toFixed(0)} ms after the cancel (poll ${pollMs} ms)`)
})

t.test('one read of the store per poll interval for every open stream, however many', async (t) => {
  const pollMs = 200
  const { follow, cancelSilently, reads, settle } = await setUp(t, pollMs)
  const jobs = await Promise.all(Array.from({ length: 40 }, follow))
  await settle(jobs.length)
  await new Promise((r) => setTimeout(r, pollMs)) // the first shared read after the streams' own first ones
  reads.length = 0
  await new Promise((r) => setTimeout(r, pollMs * 5 + 50))
  t.ok(reads.length >= 4 && reads.length <= 6, `${reads.length} reads in 5 intervals with ${jobs.length} streams open`)
  t.same(new Set(reads), new Set([jobs.length]), 'each read asks for every followed job')

  for (const job of jobs) await cancelSilently(job.jobId)
  const ends = await Promise.all(jobs.map((j) => j.ended))
  t.ok(
    ends.every((e) => e.jobEnded),
    'every stream ended with its job',
  )
  t.same(new Set(jobs.map((j) => statuses(j.seen).join())), new Set(['pending,cancelled']))
  await new Promise((r) => setTimeout(r, pollMs * 2))
  const afterEnd = reads.length
  await new Promise((r) => setTimeout(r, pollMs * 2))
  t.equal(reads.length, afterEnd, 'no reads while nothing is followed')
})

t.test('a broadcast reaches its stream at once, without a read', async (t) => {
  const { follow, cancelSilently, events, reads, settle } = await setUp(t, 60_000)
  const job = await follow()
  await settle(1)
  const event = await cancelSilently(job.jobId)
  const sentAt = performance.now()
  events.emit(event)
  const { jobEnded, at } = await job.ended
  t.ok(jobEnded)
  t.ok(at - sentAt < 10_000, `ended ${(at - sentAt).toFixed(0)} ms after the broadcast`)
  t.equal(reads.length, 1, 'only the first read, when the stream opened')
})

t.test('after NATS reconnects, the streams catch up at once', async (t) => {
  const { nc, follow, cancelSilently, settle } = await setUp(t, 60_000)
  const job = await follow()
  await settle(1)
  await cancelSilently(job.jobId)
  const reconnectAt = performance.now()
  await nc.reconnect()
  const { jobEnded, at } = await job.ended
  t.ok(jobEnded)
  t.same(statuses(job.seen), ['pending', 'cancelled'])
  t.ok(at - reconnectAt < 10_000, `ended ${(at - reconnectAt).toFixed(0)} ms after the reconnect (poll 60 s)`)
})
