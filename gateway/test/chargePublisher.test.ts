import { Writable } from 'node:stream'
import { natsChannels, type PaymentCharged } from '@ats/contracts'
import { ensureStream } from '@ats/service-kit'
import { freshNamespace, testInfra } from '@ats/service-kit/testing'
import { connect, type NatsConnection } from 'nats'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { createChargePublisher } from '../src/payments/chargePublisher.ts'

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

async function setup(t: Test, log = pino({ level: 'silent' })) {
  const { natsUrl } = await testInfra()
  const nc: NatsConnection = await connect({ servers: natsUrl })
  t.teardown(() => nc.close())
  const channels = natsChannels(await freshNamespace(t)).admin.payments
  const publisher = await createChargePublisher(nc, channels, log)
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
