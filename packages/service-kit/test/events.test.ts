import { natsChannels, type DomainEvent } from '@ats/contracts'
import { AckPolicy, DeliverPolicy, connect } from 'nats'
import pg from 'pg'
import pino from 'pino'
import t from 'tap'
import { recordEvent, startEventOutbox, type RawExecutor } from '../src/index.ts'
import { freshDatabase, freshNamespace, testInfra } from '../src/testing.ts'

const log = pino({ level: 'silent' })
const schema = 'svc'

/** A transaction on the service's schema, as Prisma's `$transaction` gives one (the search path is the schema). */
async function inTransaction(pool: pg.Pool, fn: (t: RawExecutor) => Promise<void>, commit = true) {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    await client.query(`SET LOCAL search_path TO ${schema}`)
    await fn({ $executeRawUnsafe: async (query, ...values) => (await client.query(query, values)).rowCount ?? 0 })
    await client.query(commit ? 'COMMIT' : 'ROLLBACK')
  } finally {
    client.release()
  }
}

/** Every event in the namespace's events stream, in order. */
async function streamed(natsUrl: string, namespace: string): Promise<DomainEvent[]> {
  const nc = await connect({ servers: natsUrl })
  try {
    const channels = natsChannels(namespace).admin.events
    const js = nc.jetstream()
    const jsm = await nc.jetstreamManager()
    const info = await jsm.streams.info(channels.streamSpec.name)
    const consumer = await jsm.consumers.add(channels.streamSpec.name, { ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All })
    const out: DomainEvent[] = []
    const c = await js.consumers.get(channels.streamSpec.name, consumer.name)
    for (let i = 0; i < info.state.messages; i++) {
      const m = await c.next({ expires: 2000 })
      if (m) out.push(channels.all.message.decode(m.data))
    }
    return out
  } finally {
    await nc.close()
  }
}

t.test('an event written in a transaction is published once: at once when sent, by the sweep when its process never sent it, never when rolled back', async (t) => {
  const { natsUrl } = await testInfra()
  const databaseUrl = await freshDatabase(t)
  const namespace = await freshNamespace(t)
  const nc = await connect({ servers: natsUrl })
  t.teardown(() => nc.close())
  const channels = natsChannels(namespace).admin.events
  const outbox = await startEventOutbox({ nc, channels, databaseUrl, schema, log, sweepEveryMs: 200 })
  t.teardown(() => outbox.stop())
  const pool = new pg.Pool({ connectionString: databaseUrl })
  t.teardown(() => pool.end())

  let sent = ''
  let left = ''
  await inTransaction(pool, async (tx) => {
    sent = await recordEvent(tx, { type: 'job.completed', owner: { keyId: 'key_a', wallet: '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01' }, data: { jobId: 'job_1' } })
  })
  await inTransaction(pool, async (tx) => {
    left = await recordEvent(tx, { type: 'swap.confirmed', owner: { keyId: 'key_b' }, data: { executionId: 'exe_1' } })
  })
  await inTransaction(pool, async (tx) => void (await recordEvent(tx, { type: 'job.failed', owner: { keyId: 'key_c' }, data: {} })), false)
  // the first is sent after its commit, twice (a retry): stored once
  outbox.send(sent, sent)

  let events: DomainEvent[] = []
  for (let i = 0; i < 50 && events.length < 2; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    events = await streamed(natsUrl, namespace).catch(() => [])
  }
  t.same(
    events.map((e) => e.id).sort(),
    [sent, left].sort(),
    'the sent one and the one left to the sweep, each once; the rolled-back one never',
  )
  const first = events.find((e) => e.id === sent)!
  t.match(first, { type: 'job.completed', owner: { keyId: 'key_a', wallet: '0xabcdef0123456789abcdef0123456789abcdef01' }, data: { jobId: 'job_1' } })
  t.ok(Math.abs(first.at - Date.now()) < 10_000, 'stamped with the time it was written')
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.event_outbox WHERE published_at IS NULL`)
  t.equal(rows[0].n, 0, 'both marked published')
})
