import { Writable } from 'node:stream'
import { natsChannels, type PaymentCharged } from '@ats/contracts'
import { ensureStream } from '@ats/service-kit'
import { freshNamespace, testInfra } from '@ats/service-kit/testing'
import { connect, type NatsConnection } from 'nats'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { createChargePublisher, type ChargePublisherOptions } from '../src/payments/chargePublisher.ts'
import { eventually } from '@ats/service-kit/testing'

const charge = (nonceByte: string): PaymentCharged => ({
  payer: '0x70997970C51812dc3A010C7d01b50e0d17dc79C8',
  payTo: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720',
  asset: '0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512',
  chainId: 31337,
  network: 'anvil',
  x402Version: 1,
  authorization: {
    from: '0x70997970c51812dc3a010c7d01b50e0d17dc79c8',
    to: '0xa0ee7a142d267c1f36714e4a8f75612f20a79720',
    value: '10000',
    validAfter: '0',
    validBefore: '9999999999',
    nonce: `0x${nonceByte.repeat(32)}`,
  },
  signature: `0x${'11'.repeat(65)}`,
  method: 'GET',
  route: '/agent/skills',
  resource: 'http://localhost:3000/agent/skills',
  requestId: `req-${nonceByte}`,
  chargedAt: Date.now(),
})

/** The real connection, whose JetStream publishes wait `delay.ms` first (a slow network or server). */
function slowed(nc: NatsConnection, delay: { ms: number }): NatsConnection {
  const js = nc.jetstream()
  const publish: typeof js.publish = async (...args) => {
    await new Promise((resolve) => setTimeout(resolve, delay.ms))
    return js.publish(...args)
  }
  const slowJs = new Proxy(js, { get: (target, key) => (key === 'publish' ? publish : Reflect.get(target, key)) })
  return new Proxy(nc, { get: (target, key) => (key === 'jetstream' ? () => slowJs : Reflect.get(target, key)) })
}

async function setup(t: Test, log = pino({ level: 'silent' }), options?: ChargePublisherOptions, delay = { ms: 0 }) {
  const { natsUrl } = await testInfra()
  const nc: NatsConnection = await connect({ servers: natsUrl })
  t.teardown(() => nc.close())
  const channels = natsChannels(await freshNamespace(t)).admin.payments
  const publisher = await createChargePublisher(slowed(nc, delay), channels, log, options)
  const jsm = await nc.jetstreamManager()
  const stored = async () => (await jsm.streams.info(channels.stream)).state.messages
  return { nc, channels, publisher, jsm, stored }
}

t.test('a charge is stored once in the stream, however often it is published', async (t) => {
  const { publisher, stored } = await setup(t)
  await publisher.charge(charge('aa'))
  await publisher.charge(charge('aa'))
  await publisher.charge(charge('bb'))
  t.equal(await stored(), 2, 'de-duplicated by payer and nonce')
})

t.test('charges that cannot be published are kept and delivered when the stream is back', async (t) => {
  const { nc, channels, publisher, jsm, stored } = await setup(t)
  await jsm.streams.delete(channels.stream)
  await publisher.charge(charge('cc'))
  await publisher.charge(charge('dd'))
  await ensureStream(nc, channels.streamSpec)
  t.equal(await stored(), 0, 'nothing stored while the stream was gone')
  const deadline = Date.now() + 10_000
  while ((await stored()) < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(await stored(), 2, 'both delivered by the retry')
  await publisher.close()
})

t.test('charges that arrive while a publish is in flight go together, none lost', async (t) => {
  const { publisher, jsm, channels, stored } = await setup(t)
  const nonces = Array.from({ length: 50 }, (_, i) => i.toString(16).padStart(2, '0'))
  await Promise.all(nonces.map((n) => publisher.charge(charge(n))))
  const messages = await stored()
  t.ok(messages < 50, `50 charges in ${messages} stream messages`)
  const recorded: string[] = []
  for (let seq = 1; seq <= messages; seq++) {
    const { data } = await jsm.streams.getMessage(channels.stream, { seq })
    recorded.push(...channels.charged.message.decode(data).charges.map((c) => c.authorization.nonce))
  }
  t.same(recorded.sort(), nonces.map((n) => `0x${n.repeat(32)}`).sort(), 'every charge exactly once')
})

t.test('charges unsent at shutdown are logged without their signed authorization', async (t) => {
  let logged = ''
  const sink = new Writable({
    write: (chunk, _encoding, done) => {
      logged += chunk.toString()
      done()
    },
  })
  const { channels, publisher, jsm } = await setup(t, pino({ level: 'info' }, sink))
  await jsm.streams.delete(channels.stream)
  const unsent = charge('ee')
  await publisher.charge(unsent)
  await publisher.close()
  t.match(logged, /could not be published before shutdown/)
  t.match(logged, unsent.authorization.nonce, 'the nonce is named, to find the payment')
  t.notMatch(logged, unsent.signature.slice(2, 40), 'the signature is not: whoever reads the log could spend it')
})

const recordedNonces = async (jsm: Awaited<ReturnType<NatsConnection['jetstreamManager']>>, channels: ReturnType<typeof natsChannels>['admin']['payments']) => {
  const { messages } = (await jsm.streams.info(channels.stream)).state
  const nonces: string[] = []
  for (let seq = 1; seq <= messages; seq++) {
    const { data } = await jsm.streams.getMessage(channels.stream, { seq })
    nonces.push(...channels.charged.message.decode(data).charges.map((c) => c.authorization.nonce))
  }
  return nonces
}

t.test('retries of unsent batches never overlap, even when a publish takes longer than the retry interval: no batch is dropped', async (t) => {
  const delay = { ms: 0 }
  const { nc, channels, publisher, jsm } = await setup(t, undefined, { retryEveryMs: 100 }, delay)
  await jsm.streams.delete(channels.stream)
  for (const n of ['a1', 'a2', 'a3']) await publisher.charge(charge(n))
  t.equal(publisher.unsentCount(), 3, 'three batches kept')
  // the stream is back, but every publish now takes 12 retry intervals: overlapping retry loops
  // would each send the oldest batch and each take one off the queue
  delay.ms = 1_200
  await ensureStream(nc, channels.streamSpec)
  await eventually('all unsent charges delivered', async () => (publisher.unsentCount() === 0 ? true : undefined), 20_000)
  const nonces = await recordedNonces(jsm, channels)
  t.same([...new Set(nonces)].sort(), ['a1', 'a2', 'a3'].map((n) => `0x${n.repeat(32)}`), 'every kept charge is in the stream')
  await publisher.close()
})

t.test('at maxUnsent waiting charges the publisher stops accepting until they are delivered', async (t) => {
  const { nc, channels, publisher, jsm } = await setup(t, undefined, { retryEveryMs: 100, maxUnsent: 2 })
  t.ok(publisher.accepting())
  await jsm.streams.delete(channels.stream)
  await publisher.charge(charge('b1'))
  t.ok(publisher.accepting(), 'one unsent charge: still accepting')
  await publisher.charge(charge('b2'))
  t.notOk(publisher.accepting(), 'two unsent charges: paid requests are refused (503) until they are recorded')
  await ensureStream(nc, channels.streamSpec)
  // accepting again once fewer than maxUnsent wait (the first is delivered); then the rest follows
  await eventually('accepting again', async () => (publisher.accepting() ? true : undefined))
  const both = [`0x${'b1'.repeat(32)}`, `0x${'b2'.repeat(32)}`]
  const recorded = await eventually('both charges recorded', async () => {
    const nonces = (await recordedNonces(jsm, channels)).sort()
    return nonces.length >= 2 ? nonces : undefined
  })
  t.same(recorded, both)
  await publisher.close()
})
