// JetStream: streams made to their spec, the durable consumer's redeliveries, the work-queue
// consumer (acks, progress, concurrency, retries, hand-backs), and the event outbox that
// publishes what a transaction recorded to the events stream.
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { natsChannels, topic, type DomainEvent } from '@ats/contracts'
import { AckPolicy, DeliverPolicy, connect, type NatsConnection } from 'nats'
import pg from 'pg'
import pino from 'pino'
import t, { type Test } from 'tap'
import { Type } from 'typebox'
import {
  ensureStream,
  recordEvent,
  startDurableConsumer,
  startEventOutbox,
  StartupError,
  startWorkQueueConsumer,
  type WorkOutcome,
} from '../src/index.ts'
import type { RawExecutor } from '../src/events.ts'
import type { WorkQueueOptions } from '../src/workers.ts'
import { eventually, freePort, freshDatabase, freshNamespace, natsServerPath, testInfra } from '../src/testing.ts'

// ensureStream
const spec = (name: string) => ({ name, subjects: [`test.${name}.>`], maxAgeMs: 60_000, duplicateWindowMs: 10_000 })

t.test('ensureStream creates a stream, and brings an existing one to its spec', async (t) => {
  const { natsUrl } = await testInfra()
  const nc = await connect({ servers: natsUrl })
  t.teardown(() => nc.close())
  const name = `${await freshNamespace(t)}_payments`
  const jsm = await ensureStream(nc, spec(name))
  t.same((await jsm.streams.info(name)).config.subjects, [`test.${name}.>`])
  await ensureStream(nc, { ...spec(name), maxAgeMs: 120_000 })
  t.equal((await jsm.streams.info(name)).config.max_age, 120_000 * 1_000_000, 'updated in place')
})

t.test(
  'a NATS without JetStream is a start-up error that says so',
  { skip: !existsSync(natsServerPath) && 'no nats-server binary here' },
  async (t) => {
    const port = await freePort()
    const server = spawn(natsServerPath, ['-a', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' })
    t.teardown(() => void server.kill())
    let nc: NatsConnection | undefined
    for (let i = 0; i < 50 && !nc; i++) {
      nc = await connect({ servers: `nats://127.0.0.1:${port}` }).catch(() => undefined)
      if (!nc) await new Promise((resolve) => setTimeout(resolve, 100))
    }
    if (!nc) throw new Error('nats-server without JetStream did not start')
    t.teardown(() => nc.close())
    const error = await ensureStream(nc, spec('NOJS')).then(
      () => undefined,
      (e: Error) => e,
    )
    t.type(error, StartupError)
    t.match(error?.message, /^NATS has no JetStream .*start nats-server with -js$/)
  },
)

// the durable consumer
const Note = Type.Object({ id: Type.String() })

/** Synchronous work: the event loop does nothing else meanwhile. */
const busy = (ms: number) => {
  const until = Date.now() + ms
  while (Date.now() < until);
}

t.test('a redelivery that arrives while the process is busy is handled after its nak delay, not after the ack wait', async (t) => {
  const nc = await connect({ servers: (await testInfra()).natsUrl })
  t.teardown(() => nc.close())
  const ns = await freshNamespace(t)
  const notes = topic(`${ns}.test.notes`, Note)
  const deadLetters = `${ns}.test.dead-letter`
  const stream = { name: `${ns}_notes`, subjects: [notes.subject, deadLetters], maxAgeMs: 60_000, duplicateWindowMs: 10_000 }
  const retryDelayMs = 1_000
  const ackWaitMs = 20_000
  const seen: number[] = []
  const consumer = await startDurableConsumer({
    nc,
    log: pino({ level: 'silent' }),
    stream,
    durable: 'notes',
    topic: notes,
    deadLetterSubject: deadLetters,
    maxDeliveries: 4,
    retryDelayMs,
    ackWaitMs,
    handle: async () => {
      seen.push(Date.now())
      // The process turns busy for 250 ms just as the redelivery is due, in a callback that is
      // not a timer (as a long database answer or JSON parse would be): the next turn of the
      // event loop then runs its overdue timers before it reads the socket. A consumer whose
      // pull ends at a timer of its own (nats.js `fetch` in a loop, which the kit does not use) drops
      // the message delivered meanwhile, and sees it again only after the ack wait.
      setTimeout(() => setImmediate(() => busy(250)), retryDelayMs - 60)
      throw new Error('this note cannot be stored')
    },
  })
  t.teardown(() => consumer.stop())
  const jsm = await nc.jetstreamManager()
  await nc.jetstream().publish(notes.subject, notes.message.encode({ id: 'n1' }))

  const dead = await eventually(
    'the note in the dead letters',
    () => jsm.streams.getMessage(stream.name, { last_by_subj: deadLetters }).catch(() => undefined),
    30_000,
  )
  t.match(dead.header.get('ats-dead-letter-reason'), /^failed 4 times: this note cannot be stored/)
  const gaps = seen.slice(1).map((at, i) => at - seen[i]!)
  t.equal(gaps.length, 3, 'delivered 4 times')
  for (const gap of gaps)
    t.ok(
      gap < retryDelayMs + 1_500,
      `redelivered after ${gap} ms: the nak delay (${retryDelayMs} ms) and the busy stretch, not the ack wait (${ackWaitMs} ms)`,
    )
  t.match(await jsm.consumers.info(stream.name, 'notes'), { num_pending: 0, num_ack_pending: 0 }, 'nothing left on the consumer')
})

// the event outbox
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

t.test(
  'an event written in a transaction is published once: at once when sent, by the sweep when its process never sent it, never when rolled back',
  async (t) => {
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
      sent = await recordEvent(tx, {
        type: 'job.completed',
        owner: { keyId: 'key_a', wallet: '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01' },
        data: { jobId: 'job_1' },
      })
    })
    await inTransaction(pool, async (tx) => {
      left = await recordEvent(tx, { type: 'swap.confirmed', owner: { keyId: 'key_b' }, data: { executionId: 'exe_1' } })
    })
    await inTransaction(
      pool,
      async (tx) => void (await recordEvent(tx, { type: 'job.failed', owner: { keyId: 'key_c' }, data: {} })),
      false,
    )
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
    t.match(first, {
      type: 'job.completed',
      owner: { keyId: 'key_a', wallet: '0xabcdef0123456789abcdef0123456789abcdef01' },
      data: { jobId: 'job_1' },
    })
    t.ok(Math.abs(first.at - Date.now()) < 10_000, 'stamped with the time it was written')
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.event_outbox WHERE published_at IS NULL`)
    t.equal(rows[0].n, 0, 'both marked published')
  },
)

// the work-queue consumer
const Task = Type.Object({ id: Type.String() })
type Task = { id: string }

/** A connection to the test NATS, a tasks topic in a fresh namespace, and its work-queue stream. */
async function taskStream(t: Test) {
  const nc = await connect({ servers: (await testInfra()).natsUrl })
  t.teardown(() => nc.close())
  const ns = await freshNamespace(t)
  const tasks = topic(`${ns}.test.tasks`, Task)
  const stream = {
    name: `${ns}_tasks`,
    subjects: [tasks.subject],
    maxAgeMs: 60_000,
    duplicateWindowMs: 10_000,
    retention: 'workqueue' as const,
  }
  return { nc, tasks, stream }
}

/** A work queue of its own on the test NATS, and a way to publish tasks to it. */
async function queue(t: Test, options: Partial<WorkQueueOptions<Task>> & Pick<WorkQueueOptions<Task>, 'handle'>) {
  const { nc, tasks, stream } = await taskStream(t)
  const exhausted: Array<[string, number]> = []
  const consumer = await startWorkQueueConsumer({
    nc,
    log: pino({ level: 'silent' }),
    stream,
    durable: 'workers',
    topic: tasks,
    concurrency: 2,
    ackWaitMs: 600,
    maxDeliveries: 2,
    retryDelayMs: 50,
    exhausted: async (task, deliveries) => void exhausted.push([task.id, deliveries]),
    ...options,
  })
  t.teardown(() => consumer.stop())
  const js = nc.jetstream()
  const publish = (id: string) => js.publish(tasks.subject, tasks.message.encode({ id }), { msgID: id })
  const jsm = await nc.jetstreamManager()
  const pending = async () => (await jsm.streams.info(stream.name)).state.messages
  return { publish, exhausted, pending, consumer }
}

const until = async (what: string, check: () => boolean | Promise<boolean>) => {
  for (let i = 0; i < 200; i++) {
    if (await check()) return
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}

t.test('each task is handled once and acked: it leaves the work queue', async (t) => {
  const seen: Array<[string, number]> = []
  const q = await queue(t, {
    handle: async ({ message, deliveries }) => {
      seen.push([message.id, deliveries])
      return 'done'
    },
  })
  for (const id of ['a', 'b', 'c']) await q.publish(id)
  await until('three tasks', () => seen.length === 3)
  await until('an empty queue', async () => (await q.pending()) === 0)
  t.same(seen.sort(), [
    ['a', 1],
    ['b', 1],
    ['c', 1],
  ])
})

t.test('a task that runs past the ack wait is not redelivered while its handler runs (progress signals)', async (t) => {
  const deliveries: number[] = []
  const q = await queue(t, {
    handle: async ({ deliveries: n }) => {
      deliveries.push(n)
      await new Promise((resolve) => setTimeout(resolve, 2_000))
      return 'done'
    },
  })
  await q.publish('long')
  await until('the long task to finish', async () => (await q.pending()) === 0)
  t.same(deliveries, [1], 'ack wait is 600 ms; the handler took 2 s, once')
})

t.test('no more than `concurrency` tasks run at once', async (t) => {
  let running = 0
  let most = 0
  let done = 0
  const q = await queue(t, {
    handle: async () => {
      most = Math.max(most, ++running)
      await new Promise((resolve) => setTimeout(resolve, 100))
      running--
      done++
      return 'done'
    },
  })
  for (let i = 0; i < 6; i++) await q.publish(`t${i}`)
  await until('six tasks', () => done === 6)
  t.equal(most, 2)
})

t.test('retryInMs redelivers; a handler that keeps failing is bounded: `exhausted` gets the task', async (t) => {
  const seen: Array<[string, number]> = []
  const q = await queue(t, {
    handle: async ({ message, deliveries }): Promise<WorkOutcome> => {
      seen.push([message.id, deliveries])
      if (message.id === 'later') return deliveries === 1 ? { retryInMs: 50 } : 'done'
      throw new Error('always fails')
    },
  })
  await q.publish('later')
  await q.publish('broken')
  await until('the broken task to be exhausted', () => q.exhausted.length === 1)
  t.same(q.exhausted, [['broken', 3]], 'after maxDeliveries (2) handler runs, the third delivery goes to exhausted')
  t.same(
    seen.filter(([id]) => id === 'broken').map(([, n]) => n),
    [1, 2],
  )
  t.same(
    seen.filter(([id]) => id === 'later').map(([, n]) => n),
    [1, 2],
  )
  await until('an empty queue', async () => (await q.pending()) === 0)
})

t.test('a task handed back by stopping processes more often than maxDeliveries still runs: a hand-back is not a delivery', async (t) => {
  const { nc, tasks, stream } = await taskStream(t)
  const exhausted: string[] = []
  const seen: number[] = []
  // one process of the fleet: its own consumer on the shared durable
  const worker = (handle: WorkQueueOptions<Task>['handle']) =>
    startWorkQueueConsumer({
      nc,
      log: pino({ level: 'silent' }),
      stream,
      durable: 'workers',
      topic: tasks,
      concurrency: 1,
      ackWaitMs: 600,
      maxDeliveries: 2,
      retryDelayMs: 50,
      exhausted: async (task) => void exhausted.push(task.id),
      handle,
    })
  // three rolling restarts: each process takes the task, then stops while it runs
  for (let restart = 1; restart <= 3; restart++) {
    const stopping = await worker(async ({ deliveries, shutdown }) => {
      seen.push(deliveries)
      await new Promise((resolve) => shutdown.addEventListener('abort', resolve, { once: true }))
      return 'handBack'
    })
    if (restart === 1) await nc.jetstream().publish(tasks.subject, tasks.message.encode({ id: 'long' }), { msgID: 'long' })
    await until(`process ${restart} to run the task`, () => seen.length === restart)
    await stopping.stop()
  }
  let finished = false
  const last = await worker(async ({ deliveries }) => {
    seen.push(deliveries)
    finished = true
    return 'done'
  })
  t.teardown(() => last.stop())
  await until('the task to finish', () => finished)
  t.same(exhausted, [], 'never exhausted (maxDeliveries is 2)')
  t.same(seen, [1, 1, 1, 1], 'each hand-back came back as a first delivery')
  const jsm = await nc.jetstreamManager()
  await until('an empty queue', async () => (await jsm.streams.info(stream.name)).state.messages === 0)
})
