import { topic } from '@ats/contracts'
import { connect } from 'nats'
import pino from 'pino'
import t, { type Test } from 'tap'
import { Type } from 'typebox'
import { startWorkQueueConsumer, type WorkOutcome, type WorkQueueOptions } from '../src/index.ts'
import { freshNamespace, testInfra } from '../src/testing.ts'

const Task = Type.Object({ id: Type.String() })
type Task = { id: string }

/** A work queue of its own on the test NATS, and a way to publish tasks to it. */
async function queue(t: Test, options: Partial<WorkQueueOptions<Task>> & Pick<WorkQueueOptions<Task>, 'handle'>) {
  const nc = await connect({ servers: (await testInfra()).natsUrl })
  t.teardown(() => nc.close())
  const ns = await freshNamespace(t)
  const tasks = topic(`${ns}.test.tasks`, Task)
  const stream = { name: `${ns}_tasks`, subjects: [tasks.subject], maxAgeMs: 60_000, duplicateWindowMs: 10_000, retention: 'workqueue' as const }
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
  t.same(seen.sort(), [['a', 1], ['b', 1], ['c', 1]])
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
  t.same(seen.filter(([id]) => id === 'broken').map(([, n]) => n), [1, 2])
  t.same(seen.filter(([id]) => id === 'later').map(([, n]) => n), [1, 2])
  await until('an empty queue', async () => (await q.pending()) === 0)
})

t.test('a task handed back by stopping processes more often than maxDeliveries still runs: a hand-back is not a delivery', async (t) => {
  const nc = await connect({ servers: (await testInfra()).natsUrl })
  t.teardown(() => nc.close())
  const ns = await freshNamespace(t)
  const tasks = topic(`${ns}.test.tasks`, Task)
  const stream = { name: `${ns}_tasks`, subjects: [tasks.subject], maxAgeMs: 60_000, duplicateWindowMs: 10_000, retention: 'workqueue' as const }
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
