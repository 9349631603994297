// Charges of paid requests: the charge publisher that hands them to admin's payments stream
// (on the test NATS only), then payment ids (x402 payment-identifier): the store on real Redis
// shared by two "replicas", then the whole gateway (two of them) in process before a probe
// upstream, on the devnet: a repeat gets the first answer, never a new run uncharged.
import { Writable } from 'node:stream'
import { natsChannels, paymentRequirementsV2, type PaymentCharged } from '@ats/contracts'
import { startTestDevnet } from '@ats/devnet'
import { createService, ensureStream } from '@ats/service-kit'
import { baseTestEnv, eventually, freshNamespace, testInfra } from '@ats/service-kit/testing'
import { appendPaymentIdentifierToExtensions, generatePaymentId, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier'
import Fastify from 'fastify'
import type { Redis } from 'ioredis'
import { connect, type NatsConnection } from 'nats'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { privateKeyToAccount } from 'viem/accounts'
import { createChargePublisher, type ChargePublisherOptions } from '../src/payments/chargePublisher.ts'
import {
  createPayerChain,
  createReservations,
  decodePaymentSignature,
  MalformedPaymentError,
  nonceKeyOf,
  type Payment,
} from '../src/payments/index.ts'
import { createPaymentIdStore, requestFingerprint } from '../src/payments/paymentIds.ts'
import { gatewayService } from '../src/service.ts'
import { b64, deadRedis, paymentFixtures, redisPair } from './paymentFixtures.ts'

// the charge publisher
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

const recordedNonces = async (
  jsm: Awaited<ReturnType<NatsConnection['jetstreamManager']>>,
  channels: ReturnType<typeof natsChannels>['admin']['payments'],
) => {
  const { messages } = (await jsm.streams.info(channels.stream)).state
  const nonces: string[] = []
  for (let seq = 1; seq <= messages; seq++) {
    const { data } = await jsm.streams.getMessage(channels.stream, { seq })
    nonces.push(...channels.charged.message.decode(data).charges.map((c) => c.authorization.nonce))
  }
  return nonces
}

t.test(
  'retries of unsent batches never overlap, even when a publish takes longer than the retry interval: no batch is dropped',
  async (t) => {
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
    t.same(
      [...new Set(nonces)].sort(),
      ['a1', 'a2', 'a3'].map((n) => `0x${n.repeat(32)}`),
      'every kept charge is in the stream',
    )
    await publisher.close()
  },
)

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

// payment ids: the store, then two gateways in process
const { devnet, chainEnv, publicClient } = await startTestDevnet(t)
const { redisUrl } = await testInfra()
const [redisA, redisB] = redisPair(t, redisUrl)

const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
const payer = privateKeyToAccount(devnet.accounts[1]!.privateKey)
const otherPayer = privateKeyToAccount(devnet.accounts[2]!.privateKey)
const payTo = devnet.accounts[9]!.address
const { terms, wire, signed } = paymentFixtures({ usdc, payTo, chainId: devnet.chainId, payer })

/** A v2 PAYMENT-SIGNATURE carrying `extensions` as x402's client builds them from a 402. */
const headerWith = async (
  extensions: Record<string, unknown> | undefined,
  signer = payer,
  message?: Awaited<ReturnType<typeof signed>>,
) => {
  const { message: m, signature } = message ?? (await signed(signer))
  return b64({ x402Version: 2, accepted: paymentRequirementsV2(terms), payload: wire(m, signature), ...(extensions ? { extensions } : {}) })
}
/** the 402's declaration with the client's id appended by x402's own helper */
const withId = (id: string) => appendPaymentIdentifierToExtensions({ [PAYMENT_IDENTIFIER]: { info: { required: false } } }, id)

// the whole gateway: two replicas on one Redis, a probe upstream that echoes what it gets (and
// how often it was asked: `?delayMs=` answers that much later, `?size=` pads the answer)
const probe = Fastify()
let failNext = 0
const probed: string[] = []
probe.all('/*', async (request, reply) => {
  probed.push(request.url)
  if (failNext > 0) {
    failNext--
    return reply.code(503).send({ error: 'probe down' })
  }
  const { delayMs, size } = request.query as { delayMs?: string; size?: string }
  if (delayMs) await new Promise((resolve) => setTimeout(resolve, Number(delayMs)))
  return reply.code(request.method === 'POST' ? 202 : 200).send({
    path: request.url,
    headers: request.headers,
    body: request.body ?? null,
    ...(size ? { pad: 'x'.repeat(Number(size)) } : {}),
  })
})
t.teardown(() => probe.close())
const probeUrl = await probe.listen({ port: 0, host: '127.0.0.1' })
const env: NodeJS.ProcessEnv = {
  ...(await baseTestEnv(t)),
  ...chainEnv,
  REDIS_URL: redisUrl,
  PAY_TO: payTo,
  AGENT_URL: probeUrl,
  PAYMENT_ID_TTL_SECONDS: '120',
  PAYMENT_ID_ANSWER_MAX_BYTES: '8192',
}
const gateways = [await createService(gatewayService, env), await createService(gatewayService, env)]
t.teardown(() => Promise.all(gateways.map((g) => g.close())))

const nc = await connect({ servers: env.NATS_URL! })
t.teardown(() => nc.close())
const payments = natsChannels(env.NATS_NAMESPACE!).admin.payments
// every charge published, seen on the subject itself: JetStream would drop a charge published
// again with the same message id, and this must see such a second charge if one were made
const charges: string[] = []
const subscription = nc.subscribe(payments.charged.subject)
void (async () => {
  for await (const message of subscription)
    for (const charge of payments.charged.message.decode(message.data).charges) charges.push(charge.authorization.nonce)
})()
await nc.flush()
/**
 * The nonces charged so far. The gateways publish on connections of their own, so a charge made
 * before an answer may reach this subscriber a moment after it: name the nonce a charge must
 * have arrived for (`waitFor`) before counting.
 */
const chargedNonces = async (waitFor?: string) => {
  await nc.flush()
  if (waitFor !== undefined) await eventually(`the charge of ${waitFor}`, async () => (charges.includes(waitFor) ? true : undefined))
  return [...charges]
}

t.test('the payment id is read from PAYMENT-SIGNATURE with x402 validation; a malformed one is named', async (t) => {
  const id = generatePaymentId()
  t.equal(decodePaymentSignature(await headerWith(withId(id))).paymentId, id)
  t.equal(decodePaymentSignature(await headerWith(undefined)).paymentId, undefined, 'no extension: no id')
  t.equal(
    decodePaymentSignature(await headerWith({ [PAYMENT_IDENTIFIER]: { info: { required: false } } })).paymentId,
    undefined,
    'the declaration echoed without an id',
  )
  const bad = async (extension: unknown, message: RegExp) => {
    const header = await headerWith({ [PAYMENT_IDENTIFIER]: extension })
    t.throws(() => decodePaymentSignature(header), MalformedPaymentError)
    t.throws(() => decodePaymentSignature(header), { message }, message.source)
  }
  await bad({ info: { required: false, id: 'short' } }, /^PAYMENT-SIGNATURE: extensions\.payment-identifier: Invalid payment ID format/)
  await bad({ info: { required: false, id: 'pay_has spaces and !!' } }, /Invalid payment ID format/)
  await bad({ info: { required: false, id: 42 } }, /'id' must be a string/)
  await bad('pay_1234567890abcdef', /^PAYMENT-SIGNATURE: extensions\.payment-identifier: Extension must be an object$/)
  await bad({ info: { id: generatePaymentId() } }, /'required' boolean/)
})

t.test('a fingerprint changes with the method, path, query, content type or body', async (t) => {
  const base = requestFingerprint('POST', '/agent/prompt', 'application/json', Buffer.from('{"prompt":"a"}'))
  t.equal(requestFingerprint('POST', '/agent/prompt', 'application/json', Buffer.from('{"prompt":"a"}')), base)
  const others = [
    requestFingerprint('PUT', '/agent/prompt', 'application/json', Buffer.from('{"prompt":"a"}')),
    requestFingerprint('POST', '/agent/prompt?x=1', 'application/json', Buffer.from('{"prompt":"a"}')),
    requestFingerprint('POST', '/agent/prompt', 'text/plain', Buffer.from('{"prompt":"a"}')),
    requestFingerprint('POST', '/agent/prompt', 'application/json', Buffer.from('{"prompt":"b"}')),
  ]
  t.equal(new Set([base, ...others]).size, 5)
})

const paymentOf = async (id: string, signer = payer): Promise<Payment> => decodePaymentSignature(await headerWith(withId(id), signer))
/** a replica's reservations (its own cache of balances), and its payment id store on them */
const reservationsOn = (redis: Redis) =>
  createReservations({ redis, chain: createPayerChain({ publicClient, asset: usdc }), namespace: 'ids-test' })
const storeOn = (redis: Redis, repeatWaitMs = 0) =>
  createPaymentIdStore({ redis, reservations: reservationsOn(redis), namespace: 'ids-test', ttlMs: 60_000, repeatWaitMs })
const nonceClaimed = async (redis: Redis, { authorization: a }: Payment) => (await redis.exists(nonceKeyOf(a.from, a.nonce))) === 1

t.test(
  'first use claims the nonce; the same request with the same payment again is a repeat; another request or another payment is refused',
  async (t) => {
    const [a, b] = [storeOn(redisA), storeOn(redisB)]
    const id = generatePaymentId()
    const first = await paymentOf(id)
    t.same(await a.claim(payer.address, id, 'fp-1', first), { kind: 'first' })
    t.equal(await nonceClaimed(redisB, first), true, 'its nonce is claimed')
    t.same(await b.claim(payer.address, id, 'fp-1', first), { kind: 'repeat' }, 'the first payment sent again, on the other replica')

    const resigned = await paymentOf(id)
    t.same(
      await b.claim(payer.address, id, 'fp-1', resigned),
      { kind: 'other_payment', nonce: first.authorization.nonce },
      'a new authorization under the id is not a repeat',
    )
    t.equal(await nonceClaimed(redisA, resigned), false, "the refused payment's nonce was left unclaimed")
    t.same(await a.claim(payer.address, id, 'fp-2', await paymentOf(id)), { kind: 'conflict' })
    t.same(
      await a.claim(otherPayer.address, id, 'fp-2', await paymentOf(id, otherPayer)),
      { kind: 'first' },
      "ids are per payer: another payer's same id is theirs",
    )
    const ttl = await redisA.pttl(`ats-x402-id:ids-test:${payer.address.toLowerCase()}:${id}`)
    t.ok(ttl > 55_000 && ttl <= 60_000, `the record is kept for the TTL (${ttl} ms)`)
  },
)

t.test('a new id on a payment whose nonce was used is refused, and the id stays free', async (t) => {
  const store = storeOn(redisA)
  const payment = await paymentOf(generatePaymentId())
  t.same(await reservationsOn(redisA).reserve(payment, payer.address), { kind: 'ok' }, 'spent without an id')
  const id = generatePaymentId()
  t.same(await store.claim(payer.address, id, 'fp', payment), { kind: 'nonce_used' })
  t.same(await store.claim(payer.address, id, 'fp', await paymentOf(id)), { kind: 'first' }, 'no record was left behind')
})

t.test('50 concurrent claims of one id on two replicas: one first run; the repeats wait for its answer', async (t) => {
  const stores = [storeOn(redisA), storeOn(redisB)]
  const id = generatePaymentId()
  const payment = await paymentOf(id)
  const { nonce } = payment.authorization
  const claims = await Promise.all(Array.from({ length: 50 }, (_, i) => stores[i % 2]!.claim(payer.address, id, 'fp', payment)))
  t.equal(claims.filter((c) => c.kind === 'first').length, 1, 'one first')
  t.equal(claims.filter((c) => c.kind === 'repeat').length, 49, 'the rest repeats')
  const turns = () => Promise.all(Array.from({ length: 20 }, (_, i) => stores[i % 2]!.turn(payer.address, id, nonce)))
  t.ok(
    (await turns()).every((turn) => turn.kind === 'in_progress'),
    'while the first runs: in progress',
  )

  await stores[0]!.ended(payer.address, id, nonce, { kind: 'failed' })
  const afterFailure = await turns()
  t.equal(afterFailure.filter((turn) => turn.kind === 'run').length, 1, 'after an error answer, one repeat runs it again')
  t.equal(afterFailure.filter((turn) => turn.kind === 'in_progress').length, 19, 'the others wait for that run')

  const answer = { status: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from('{"ok":true}') }
  await stores[1]!.ended(payer.address, id, nonce, { kind: 'answered', answer })
  t.ok(
    (await turns()).every((turn) => turn.kind === 'answer' && turn.answer.body.equals(answer.body) && turn.answer.status === 200),
    'every repeat gets the answer',
  )
  await stores[0]!.ended(payer.address, id, nonce, { kind: 'failed' })
  t.match(await stores[0]!.turn(payer.address, id, nonce), { kind: 'answer' }, 'an answer is final: a late failure does not replace it')
})

t.test('a repeat waits a moment for a run in progress, and gets its answer', async (t) => {
  const [waiting, running] = [storeOn(redisA, 2_000), storeOn(redisB)]
  const id = generatePaymentId()
  const payment = await paymentOf(id)
  t.same(await running.claim(payer.address, id, 'fp', payment), { kind: 'first' })
  const turn = waiting.turn(payer.address, id, payment.authorization.nonce)
  await running.ended(payer.address, id, payment.authorization.nonce, { kind: 'not_stored', reason: 'a stream of events is not kept' })
  t.same(await turn, { kind: 'not_stored', reason: 'a stream of events is not kept' })
})

t.test('an unreachable Redis fails closed (503), never a free repeat', async (t) => {
  const dead = storeOn(deadRedis(t))
  const id = generatePaymentId()
  const payment = await paymentOf(id)
  await t.rejects(dead.claim(payer.address, id, 'fp', payment), {
    name: 'PaymentUnavailableError',
    message: /^reservation store unavailable/,
  })
  await t.rejects(dead.turn(payer.address, id, payment.authorization.nonce), {
    name: 'PaymentUnavailableError',
    message: /^payment id store unavailable/,
  })
})

const post = (via: number, header: string, body: unknown, url = '/agent/prompt') =>
  gateways[via]!.app.inject({
    method: 'POST',
    url,
    headers: { 'payment-signature': header, 'content-type': 'application/json' },
    payload: JSON.stringify(body),
  })
const decode = (header: string | string[] | number | undefined) => JSON.parse(Buffer.from(String(header), 'base64').toString('utf8'))

t.test('402s advertise the payment-identifier extension (optional) beside bazaar discovery', async (t) => {
  const res = await gateways[0]!.app.inject({ method: 'POST', url: '/agent/prompt', payload: { prompt: 'hi' } })
  t.equal(res.statusCode, 402)
  const { extensions } = decode(res.headers['payment-required'])
  t.match(extensions[PAYMENT_IDENTIFIER], { info: { required: false }, schema: { properties: { id: { minLength: 16, maxLength: 128 } } } })
  t.match(extensions.bazaar, { routeTemplate: '/agent/prompt' })
  t.equal(res.json().x402Version, 1, 'the body is x402 v1, which has no extensions: ids need PAYMENT-SIGNATURE (v2)')
})

t.test('the same request with one payment id on two gateways: forwarded with one idempotency key, charged once', async (t) => {
  const id = generatePaymentId()
  const message = await signed()
  const header = await headerWith(withId(id), payer, message)
  const body = { prompt: 'What is the price of ETH?', context: { b: 1, a: [1, 2] } }
  const asked = probed.length
  const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => post(i % 2, header, body)))
  t.same(
    answers.map((a) => a.statusCode),
    [202, 202, 202, 202, 202, 202],
  )
  const seen = answers.map((a) => a.json() as { body: unknown; headers: Record<string, string> })
  t.ok(
    seen.every((s) => JSON.stringify(s.body) === JSON.stringify(body)),
    'the body reached the service whole, every time',
  )
  const key = `${payer.address.toLowerCase()}:${id}:${message.message.nonce}`
  t.same(new Set(seen.map((s) => s.headers['x-ats-idempotency-key'])), new Set([key]), 'every copy carries <payer>:<id>:<nonce>')
  t.ok(
    answers.every((a) => decode(a.headers['payment-response']).success === true),
    'every answer says it is paid',
  )

  t.equal(answers.filter((a) => a.headers['idempotent-replayed'] === 'true').length, 5, 'five are the first answer given again')
  t.equal(probed.length - asked, 1, 'the service was asked once')

  const resigned = await post(1, await headerWith(withId(id)), body)
  t.equal(resigned.statusCode, 409, 'a newly signed payment with the id is refused')
  t.equal(
    resigned.json().error,
    `payment id ${id} was first used with another payment (nonce ${message.message.nonce}): to get its answer again send that same payment again; a new payment needs a new id`,
  )
  const charged = await chargedNonces(message.message.nonce)
  t.equal(charged.filter((n) => n === message.message.nonce).length, 1, 'one charge, of the first payment')
  t.equal(charged.length, 1, 'and nothing else')
})

t.test('the id with another body, path or query answers 409 naming it; nothing is charged', async (t) => {
  const id = generatePaymentId()
  const header = await headerWith(withId(id))
  t.equal((await post(0, header, { prompt: 'one' })).statusCode, 202)
  // the first request's charge comes over the gateway's own connection: count from once it is here
  const before = (await chargedNonces(decodePaymentSignature(header).authorization.nonce)).length
  for (const [body, url] of [
    [{ prompt: 'two' }, '/agent/prompt'],
    [{ prompt: 'one' }, '/agent/prompt?x=1'],
    [{ prompt: 'one' }, '/agent/job/job_x/cancel'],
  ] as const) {
    const res = await post(1, await headerWith(withId(id)), body, url)
    t.equal(res.statusCode, 409, `${url} ${JSON.stringify(body)}`)
    t.same(res.json(), {
      error: `payment id ${id} was first used with another request (method, path, query or body differ); use a new id for a new request`,
    })
    t.notOk(res.headers['payment-response'], 'refused before the service: no payment response')
  }
  t.equal((await chargedNonces()).length, before)
})

t.test('a malformed id answers 402 naming it; a new id on a spent payment answers 402 nonce already used', async (t) => {
  const malformed = await post(0, await headerWith({ [PAYMENT_IDENTIFIER]: { info: { required: false, id: 'too-short' } } }), {
    prompt: 'x',
  })
  t.equal(malformed.statusCode, 402)
  t.match(malformed.json(), { error: /^PAYMENT-SIGNATURE: extensions\.payment-identifier: Invalid payment ID format/ })

  // the extensions are not signed: a spent payment with another id must not pass
  const message = await signed()
  t.equal((await post(0, await headerWith(withId(generatePaymentId()), payer, message), { prompt: 'x' })).statusCode, 202)
  const reused = await post(1, await headerWith(withId(generatePaymentId()), payer, message), { prompt: 'x' })
  t.equal(reused.statusCode, 402)
  t.match(reused.json(), { error: /^nonce already used/ })
})

t.test('when the first answer was an error, the repeat that succeeds is the one charged', async (t) => {
  const id = generatePaymentId()
  const message = await signed()
  const header = await headerWith(withId(id), payer, message)
  failNext = 1
  const failed = await post(0, header, { prompt: 'retry me' })
  t.equal(failed.statusCode, 503)
  t.match(decode(failed.headers['payment-response']), {
    success: false,
    errorReason: /^not charged: the service answered 503; send it again with the same payment id to retry$/,
  })
  const before = await chargedNonces()
  const retried = await post(1, header, { prompt: 'retry me' })
  t.equal(retried.statusCode, 202)
  const after = await chargedNonces(message.message.nonce)
  t.same(after.slice(before.length), [message.message.nonce], 'charged now, once')
  t.equal((await post(0, header, { prompt: 'retry me' })).statusCode, 202)
  t.equal((await chargedNonces()).length, after.length, 'and not again')
})

t.test('a client cannot send its own x-ats-idempotency-key', async (t) => {
  const { message, signature } = await signed()
  const res = await gateways[0]!.app.inject({
    method: 'POST',
    url: '/agent/prompt',
    headers: {
      'payment-signature': await headerWith(undefined, payer, { message, signature }),
      'x-ats-idempotency-key': 'forged',
      'content-type': 'application/json',
    },
    payload: { prompt: 'x' },
  })
  t.equal(res.statusCode, 202)
  t.notOk('x-ats-idempotency-key' in res.json().headers, 'without a payment id there is none')
})

t.test('a chunked body is fingerprinted whole and forwarded whole: the same bytes chunked are a repeat', async (t) => {
  const id = generatePaymentId()
  const header = await headerWith(withId(id))
  const body = { prompt: 'chunked '.repeat(200) }
  const first = await post(0, header, body)
  t.equal(first.statusCode, 202)
  const url = await gateways[1]!.listen()
  const bytes = Buffer.from(JSON.stringify(body))
  const chunked = new ReadableStream({
    start(controller) {
      for (let i = 0; i < bytes.length; i += 100) controller.enqueue(bytes.subarray(i, i + 100))
      controller.close()
    },
  })
  // a stream body: fetch sends it with Transfer-Encoding: chunked, no Content-Length
  const res = await fetch(`${url}/agent/prompt`, {
    method: 'POST',
    headers: { 'payment-signature': header, 'content-type': 'application/json' },
    body: chunked,
    duplex: 'half',
  } as RequestInit)
  t.equal(res.status, 202)
  const seen = (await res.json()) as { body: unknown; headers: Record<string, string> }
  t.same(seen.body, body, 'the service got the whole body')
  t.equal(seen.headers['x-ats-idempotency-key'], first.json().headers['x-ats-idempotency-key'], 'a repeat of the first')
})

const get = (via: number, header: string, url: string) =>
  gateways[via]!.app.inject({ method: 'GET', url, headers: { 'payment-signature': header } })

t.test('a repeat while the first is still being answered waits 2 s, then answers 409 with Retry-After; later, the answer', async (t) => {
  const id = generatePaymentId()
  const header = await headerWith(withId(id))
  const url = `/agent/skills?delayMs=4000&id=${id}`
  const first = get(0, header, url)
  await eventually('the first request at the service', async () => (probed.includes(url) ? true : undefined))
  const early = await get(1, header, url)
  t.equal(early.statusCode, 409)
  t.same(early.json(), { error: `payment id ${id}: the request is still being answered; send it again in a few seconds` })
  t.equal(early.headers['retry-after'], '2')
  t.equal((await first).statusCode, 200)
  const later = await get(1, header, url)
  t.equal(later.statusCode, 200)
  t.equal(later.body, (await first).body, 'the first answer')
  t.equal(probed.filter((u) => u === url).length, 1, 'the service was asked once')
})

t.test('an answer larger than PAYMENT_ID_ANSWER_MAX_BYTES is given once, in full; its repeat answers 409 saying why', async (t) => {
  const id = generatePaymentId()
  const header = await headerWith(withId(id))
  const url = `/agent/skills?size=20000&id=${id}`
  const first = await get(0, header, url)
  t.equal(first.statusCode, 200)
  t.equal(first.json().pad.length, 20_000, 'the whole answer')
  t.equal(decode(first.headers['payment-response']).success, true, 'charged')
  const again = await get(1, header, url)
  t.equal(again.statusCode, 409)
  t.same(again.json(), {
    error: `payment id ${id}: its answer was given once and not kept (larger than the 8192 bytes kept), so it is not given again; a new payment with a new id asks again`,
  })
  t.equal(probed.filter((u) => u === url).length, 1, 'not run again')
})

t.test('a v2 payment made for another resource or other terms is refused (402 naming it) and its nonce left unused', async (t) => {
  const { message, signature } = await signed()
  const v2 = (top: Record<string, unknown>) =>
    b64({ x402Version: 2, accepted: paymentRequirementsV2(terms), payload: wire(message, signature), ...top })
  const resource = (url: string) => ({ resource: { url, description: 'x', mimeType: 'application/json' } })
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [
      resource('http://localhost:3000/agent/prompt'),
      /^wrong resource: the payment was made for http:\/\/localhost:3000\/agent\/prompt, not for GET http:\/\/localhost:\d+\/agent\/skills; /,
    ],
    [resource('mcp://tool/agent_prompt'), /^wrong resource: the payment was made for mcp:\/\/tool\/agent_prompt, not for GET /],
    [resource('not a url'), /^wrong resource: the payment was made for not a url, /],
    [
      { accepted: { ...paymentRequirementsV2(terms), amount: '20000' } },
      /^wrong requirements: .*\(accepted\.amount "20000" is not "10000"\)/,
    ],
    [{ accepted: { ...paymentRequirementsV2(terms), payTo: otherPayer.address } }, /accepted\.payTo 0x[0-9a-fA-F]{40} is not /],
  ]
  for (const [top, error] of cases) {
    const res = await get(0, v2(top), '/agent/skills')
    t.equal(res.statusCode, 402, error.source)
    t.match(res.json(), { error }, error.source)
  }
  const asTool = await get(0, v2(resource('mcp://tool/agent_skills')), '/agent/skills')
  t.equal(asTool.statusCode, 200, 'the MCP tool that calls the route names a resource good for it; the nonce was still unused')
  const own = await get(1, v2(resource('http://localhost:3000/agent/skills')), '/agent/skills')
  t.equal(own.statusCode, 402, 'and now it is used')
  t.match(
    own.json(),
    { error: /^nonce already used/ },
    'the resource is compared by path: without PUBLIC_URL a gateway names itself by its port',
  )
})
