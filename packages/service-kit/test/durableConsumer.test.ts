import { topic } from '@ats/contracts'
import { connect } from 'nats'
import pino from 'pino'
import t from 'tap'
import { Type } from 'typebox'
import { startDurableConsumer } from '../src/index.ts'
import { eventually, freshNamespace, testInfra } from '../src/testing.ts'

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
      // pull ends at a timer of its own (nats.js `fetch`, as the kit used until issue 22) dropped
      // the message delivered meanwhile, and saw it again only after the ack wait.
      setTimeout(() => setImmediate(() => busy(250)), retryDelayMs - 60)
      throw new Error('this note cannot be stored')
    },
  })
  t.teardown(() => consumer.stop())
  const jsm = await nc.jetstreamManager()
  await nc.jetstream().publish(notes.subject, notes.message.encode({ id: 'n1' }))

  const dead = await eventually('the note in the dead letters', () => jsm.streams.getMessage(stream.name, { last_by_subj: deadLetters }).catch(() => undefined), 30_000)
  t.match(dead.header.get('ats-dead-letter-reason'), /^failed 4 times: this note cannot be stored/)
  const gaps = seen.slice(1).map((at, i) => at - seen[i]!)
  t.equal(gaps.length, 3, 'delivered 4 times')
  for (const gap of gaps) t.ok(gap < retryDelayMs + 1_500, `redelivered after ${gap} ms: the nak delay (${retryDelayMs} ms) and the busy stretch, not the ack wait (${ackWaitMs} ms)`)
  t.match(await jsm.consumers.info(stream.name, 'notes'), { num_pending: 0, num_ack_pending: 0 }, 'nothing left on the consumer')
})
