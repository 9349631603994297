// Replicated JetStream (JETSTREAM_REPLICAS) on a real 3-node NATS cluster: streams, durable
// consumers and buckets are kept on every server, a fleet that made them with one copy brings
// them to three, publishes are acked once stored, and one server killed loses no acked message.
import { existsSync } from 'node:fs'
import { topic } from '@ats/contracts'
import { connect, type NatsConnection, type StreamInfo } from 'nats'
import pino from 'pino'
import t from 'tap'
import { Type } from 'typebox'
import { createService, ensureStream, openBucket, startDurableConsumer, StartupError, type ServiceDefinition } from '../src/index.ts'
import { setJetStreamReplicas } from '../src/jetstream.ts'
import { eventually, freshNamespace, natsServerPath, startNatsCluster, testInfra, testInternalToken } from '../src/testing.ts'

const log = pino({ level: 'silent' })
const Note = Type.Object({ id: Type.String() })
const notes = topic('test.cluster.notes', Note)
const deadLetters = 'test.cluster.dead-letter'
const stream = { name: 'cluster_notes', subjects: [notes.subject, deadLetters], maxAgeMs: 60_000, duplicateWindowMs: 60_000 }

/** A process of the fleet that only connects: createService reads JETSTREAM_REPLICAS like every process. */
const bare: ServiceDefinition<{}, never> = { name: 'replicated', version: '0.0.0', port: 0, async register() {} }
const fleetOn = (natsUrl: string, replicas: string) =>
  createService(bare, {
    NATS_URL: natsUrl,
    JETSTREAM_REPLICAS: replicas,
    INTERNAL_TOKEN: testInternalToken,
    LOG_LEVEL: 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
  })

const skip =
  !existsSync(natsServerPath) && `${natsServerPath} is not installed: the replicated JetStream test starts a real 3-node NATS cluster`

t.test(
  'with JETSTREAM_REPLICAS=3 every stream, consumer and bucket is on three servers, and one server killed loses no acked message',
  { skip },
  async (t) => {
    const cluster = await startNatsCluster({ nodes: 3 })
    t.teardown(cluster.stop)
    const natsUrl = cluster.urls.join(',')

    const startConsumer = (nc: NatsConnection) =>
      startDurableConsumer({ nc, log, stream, durable: 'notes', topic: notes, deadLetterSubject: deadLetters, handle: async () => {} })

    // the fleet as it ran before: one copy of each
    const before = await fleetOn(natsUrl, '1')
    await (await startConsumer(before.ctx.nc)).stop()
    await openBucket(before.ctx.nc, 'cluster-flags')
    await before.close()

    const fleet = await fleetOn(natsUrl, '3')
    t.teardown(() => fleet.close())
    const { nc } = fleet.ctx
    const consumer = await startConsumer(nc)
    t.teardown(() => consumer.stop())
    const bucket = await openBucket(nc, 'cluster-flags')

    const fleetJsm = await nc.jetstreamManager()
    const copies = async () => ({
      stream: await fleetJsm.streams.info(stream.name),
      consumer: await fleetJsm.consumers.info(stream.name, 'notes'),
      bucket: (await bucket.status()).streamInfo,
    })
    const placed = await eventually('three copies of the stream, the consumer and the bucket', async () => {
      const now = await copies()
      return [now.stream, now.consumer, now.bucket].every(
        (info) => info.cluster?.replicas?.length === 2 && info.cluster.replicas.every((r) => r.current),
      )
        ? now
        : undefined
    })
    t.equal(placed.stream.config.num_replicas, 3, 'the stream made with one copy now asks for three')
    t.equal(placed.bucket.config.num_replicas, 3, 'so does the bucket')
    t.equal(placed.consumer.config.num_replicas, 3, 'and the durable consumer')

    // publish through the stream leader's server, and kill a server that leads neither the stream
    // nor the bucket: the two left make a majority with each leader, so no election is needed. (A
    // publish in flight on a connection whose server dies is lost with it: the client times out,
    // and the fleet's publishers send it again with the same message id.)
    const serverOf = (info: StreamInfo) => cluster.names.indexOf(info.cluster!.leader!)
    const home = serverOf(placed.stream)
    const client = await connect({ servers: cluster.urls[home] })
    t.teardown(() => client.close())
    const js = client.jetstream()
    const flags = await js.views.kv('cluster-flags', { bindOnly: true })
    const publish = (id: string) => js.publish(notes.subject, notes.message.encode({ id }), { msgID: id, timeout: 5_000 })
    t.match(await publish('n0'), { stream: stream.name, seq: 1, duplicate: false }, 'a publish answers once the stream stored it')

    const victim = cluster.names.findIndex((_, i) => i !== home && i !== serverOf(placed.bucket))
    await cluster.kill(victim)
    for (let i = 1; i <= 5; i++)
      t.match(await publish(`n${i}`), { seq: i + 1, duplicate: false }, `n${i} acked with ${cluster.names[victim]} gone`)
    t.ok(await flags.put('paused', new TextEncoder().encode('yes')), 'a bucket write is acked too')

    // no account-info check: the JetStream meta leader answers it, and that may be the server killed
    const jsm = await client.jetstreamManager({ checkAPI: false })
    const stored = await Promise.all(
      [1, 2, 3, 4, 5, 6].map(async (seq) => notes.message.decode((await jsm.streams.getMessage(stream.name, { seq })).data).id),
    )
    t.same(stored, ['n0', 'n1', 'n2', 'n3', 'n4', 'n5'], 'every acked note is in the stream, in order')
    t.equal((await jsm.streams.info(stream.name)).state.messages, 6, 'and nothing else')
    t.equal(new TextDecoder().decode((await flags.get('paused'))?.value), 'yes', 'and the bucket has the value')
  },
)

t.test('JETSTREAM_REPLICAS above what NATS can place stops the start with a message that names it', async (t) => {
  const { natsUrl } = await testInfra()
  const nc = await connect({ servers: natsUrl })
  t.teardown(() => nc.close())
  setJetStreamReplicas(nc, 3)
  const ns = await freshNamespace(t)
  const error = await ensureStream(nc, { ...stream, name: `${ns}_notes`, subjects: [`test.${ns}.>`] }).then(
    () => undefined,
    (e: Error) => e,
  )
  t.type(error, StartupError)
  t.match(
    error?.message,
    /^NATS cannot keep 3 copies of a stream .*JETSTREAM_REPLICAS must be at most the number of servers in the NATS cluster/,
  )
})
