import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { identityHeaders, natsChannels, type DomainEvent, type WebhookEventType } from '@ats/contracts'
import { newEventId } from '@ats/service-kit'
import { testInternalToken } from '@ats/service-kit/testing'
import pg from 'pg'
import { Webhook } from 'standardwebhooks'
import t, { type Test } from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { adminHeaders, devnetUsdc, eventually, freshAddress, signCharge, startAdmin } from './helpers.ts'

/**
 * Webhooks in admin: subscriptions through the routes, events published straight to the events
 * stream (as the other services' outboxes do), delivered to a local receiver with the
 * development settings (http, loopback), a fast retry schedule and a fast poll.
 */

const devSettings = {
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'true',
  WEBHOOK_RETRY_SCHEDULE: '100ms,100ms,100ms,100ms',
  WEBHOOK_TIMEOUT_MS: '2000',
  // retries are due 100 ms after a failure: look for them that often
  WEBHOOK_POLL_MS: '100',
}

interface Received {
  headers: IncomingHttpHeaders
  body: string
}

/** A local HTTP receiver that records each request and answers with `status(n)` (n: 1 for the first request). */
async function receiver(t: Test, status: (n: number) => number = () => 200) {
  const got: Received[] = []
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    got.push({ headers: req.headers, body: Buffer.concat(chunks).toString() })
    res.statusCode = status(got.length)
    res.end('thanks')
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got }
}

const signedHeaders = (r: Received) => ({
  'webhook-id': String(r.headers['webhook-id']),
  'webhook-timestamp': String(r.headers['webhook-timestamp']),
  'webhook-signature': String(r.headers['webhook-signature']),
})

interface Key {
  id: string
  tier: string
  wallet: string | null
}

async function start(t: Test, extra: NodeJS.ProcessEnv = {}, options: Parameters<typeof startAdmin>[2] = {}) {
  const admin = await startAdmin(t, { ...devSettings, ...extra }, options)
  const events = natsChannels(admin.env.NATS_NAMESPACE!).admin.events
  t.teardown(() => admin.jsm.streams.delete(events.streamSpec.name).catch(() => false))
  const js = admin.nc.jetstream()

  /** a request as the gateway forwards it for `key` (no key: the test admin identity) */
  const as = async (key: Key | undefined, method: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = key
      ? {
          [identityHeaders.internalToken]: testInternalToken,
          [identityHeaders.keyId]: key.id,
          [identityHeaders.tier]: key.tier,
          ...(key.wallet ? { [identityHeaders.wallet]: key.wallet } : {}),
        }
      : { ...adminHeaders }
    if (body !== undefined) headers['content-type'] = 'application/json'
    const res = await fetch(`${admin.svc.url}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
    const text = await res.text()
    return { status: res.status, body: (text ? JSON.parse(text) : undefined) as any }
  }

  /** a key in admin's key store (POST /admin/keys) */
  const newKey = async (tier: 'readwrite' | 'admin', wallet?: string): Promise<Key> => {
    const res = await as(undefined, 'POST', '/admin/keys', { tier, label: `${tier} key`, ...(wallet ? { wallet } : {}) })
    if (res.status !== 201) throw new Error(`POST /admin/keys answered ${res.status}: ${JSON.stringify(res.body)}`)
    return { id: res.body.id, tier, wallet: res.body.wallet }
  }

  const subscribe = async (key: Key, url: string, types: WebhookEventType[]) => {
    const res = await as(key, 'POST', '/webhooks', { url, events: types })
    if (res.status !== 201) throw new Error(`POST /webhooks answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body as { id: string; secret: string }
  }

  /** publishes an event to the events stream as a service's outbox does */
  const publish = async (type: WebhookEventType, owner: DomainEvent['owner'], data: Record<string, unknown> = { jobId: 'job_1' }) => {
    const event: DomainEvent = { id: newEventId(), type, at: Date.now(), owner, data }
    await js.publish(events.subjectOf(type), events.all.message.encode(event), { msgID: event.id })
    return event
  }

  const deliveries = async (key: Key | undefined, webhookId: string) =>
    (await as(key, 'GET', `/webhooks/${webhookId}/deliveries`)).body.deliveries as any[]

  /** one statement on admin's database, for what no route does (a revocation that raced, a fan-out that raced) */
  const sql = async (text: string, values: unknown[] = []) => {
    const client = new pg.Client({ connectionString: admin.env.DATABASE_URL })
    await client.connect()
    try {
      return (await client.query(text, values)).rows
    } finally {
      await client.end()
    }
  }

  return { ...admin, publishCharges: admin.publish, events, js, as, newKey, subscribe, publish, deliveries, sql }
}

t.test('an event reaches its owner subscription once, signed per Standard Webhooks', async (t) => {
  const admin = await start(t)
  const hook = await receiver(t)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['job.completed'])
  t.match(sub, {
    id: /^whk_/,
    secret: /^whsec_/,
    url: hook.url,
    events: ['job.completed'],
    enabled: true,
    disabledReason: null,
    keyId: key.id,
  })

  const event = await admin.publish(
    'job.completed',
    { keyId: key.id },
    { jobId: 'job_abc', status: 'complete', prompt: 'hi', result: 'hello' },
  )
  const [got] = await eventually('the delivery', async () => hook.got[0] && hook.got)
  t.same(JSON.parse(got!.body), { id: event.id, type: 'job.completed', timestamp: new Date(event.at).toISOString(), data: event.data })
  t.equal(got!.headers['webhook-id'], event.id)
  t.same(new Webhook(sub.secret).verify(got!.body, signedHeaders(got!)), JSON.parse(got!.body), 'the signature verifies with the secret')
  t.throws(
    () => new Webhook(`whsec_${randomBytes(24).toString('base64')}`).verify(got!.body, signedHeaders(got!)),
    'another secret does not verify it',
  )

  // the same event again (a second publish that JetStream does not drop): still one delivery
  await admin.js.publish(admin.events.subjectOf('job.completed'), admin.events.all.message.encode(event), { msgID: `${event.id}-again` })
  await admin.publish('job.failed', { keyId: key.id })
  const log = await eventually('the delivery log', async () => {
    const d = await admin.deliveries(key, sub.id)
    return d.length === 1 && d[0].status === 'succeeded' ? d : undefined
  })
  t.match(log[0], {
    id: /^whd_/,
    eventId: event.id,
    eventType: 'job.completed',
    attempts: 1,
    nextAttemptAt: null,
    deliveredAt: Number,
    lastAttempt: { status: 200, response: 'thanks' },
  })
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.equal(hook.got.length, 1, 'delivered once')
})

t.test('a receiver that answers 500 three times gets the event on the fourth try, with the same webhook-id', async (t) => {
  const admin = await start(t)
  const hook = await receiver(t, (n) => (n <= 3 ? 500 : 204))
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['swap.confirmed'])
  const event = await admin.publish('swap.confirmed', { keyId: key.id }, { executionId: 'exe_1', hash: '0xabc' })

  const [delivery] = await eventually('the delivery to succeed', async () => {
    const d = await admin.deliveries(key, sub.id)
    return d[0]?.status === 'succeeded' ? d : undefined
  })
  t.equal(hook.got.length, 4)
  t.same(
    hook.got.map((r) => r.headers['webhook-id']),
    [event.id, event.id, event.id, event.id],
    'the same webhook-id on every try',
  )
  for (const r of hook.got) t.ok(new Webhook(sub.secret).verify(r.body, signedHeaders(r)), 'each try is signed')
  t.equal(delivery.attempts, 4)
  t.same(
    delivery.attemptLog.map((a: { status: number }) => a.status),
    [500, 500, 500, 204],
  )
  t.ok(delivery.attemptLog.every((a: { durationMs: number; at: number }) => a.durationMs >= 0 && a.at > 0))
})

t.test("a key never receives another owner's events; an admin subscription receives every owner's", async (t) => {
  const admin = await start(t)
  const [mine, theirs, everyone] = await Promise.all([receiver(t), receiver(t), receiver(t)])
  const wallet = freshAddress()
  const key = await admin.newKey('readwrite')
  const walletKey = await admin.newKey('readwrite', wallet)
  const adminKey = await admin.newKey('admin')
  await admin.subscribe(key, mine.url, ['job.completed', 'payment.settled'])
  await admin.subscribe(walletKey, theirs.url, ['job.completed', 'payment.settled'])
  await admin.subscribe(adminKey, everyone.url, ['job.completed', 'payment.settled'])

  const ofKey = await admin.publish('job.completed', { keyId: key.id })
  const ofWallet = await admin.publish('payment.settled', { wallet: wallet.toLowerCase() }, { payer: wallet.toLowerCase() })
  const ofStranger = await admin.publish('job.completed', { keyId: 'key_someone_else', wallet: freshAddress().toLowerCase() })

  await eventually('the admin subscription to get all three', async () => (everyone.got.length >= 3 ? true : undefined))
  await eventually('the owners to get theirs', async () => (mine.got.length >= 1 && theirs.got.length >= 1 ? true : undefined))
  await new Promise((resolve) => setTimeout(resolve, 500))
  const ids = (r: { got: Received[] }) => r.got.map((g) => g.headers['webhook-id']).sort()
  t.same(ids(mine), [ofKey.id], "the key gets its own job's event only")
  t.same(ids(theirs), [ofWallet.id], "the wallet-bound key gets its wallet's payment only")
  t.same(ids(everyone), [ofKey.id, ofWallet.id, ofStranger.id].sort(), 'the admin key gets every owner')
})

t.test('only the event types a subscription asked for are delivered', async (t) => {
  const admin = await start(t)
  const hook = await receiver(t)
  const key = await admin.newKey('readwrite')
  await admin.subscribe(key, hook.url, ['job.failed', 'automation.run.failed'])
  await admin.publish('job.completed', { keyId: key.id })
  const failed = await admin.publish('job.failed', { keyId: key.id })
  await admin.publish('automation.run.succeeded', { keyId: key.id })
  const runFailed = await admin.publish(
    'automation.run.failed',
    { keyId: key.id },
    { automationId: 'aut_1', runId: 'run_1', status: 'failed', error: 'no' },
  )
  await eventually('two deliveries', async () => (hook.got.length >= 2 ? true : undefined))
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.same(hook.got.map((g) => g.headers['webhook-id']).sort(), [failed.id, runFailed.id].sort())
})

t.test('redeliver sends a delivery again now, with the same webhook-id and its tries counted afresh', async (t) => {
  const admin = await start(t)
  const hook = await receiver(t)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['automation.completed'])
  const event = await admin.publish(
    'automation.completed',
    { keyId: key.id },
    { automationId: 'aut_1', status: 'completed', statusReason: 'done' },
  )
  const [first] = await eventually('the delivery', async () => {
    const d = await admin.deliveries(key, sub.id)
    return d[0]?.status === 'succeeded' ? d : undefined
  })

  const res = await admin.as(key, 'POST', `/webhooks/${sub.id}/deliveries/${first.id}/redeliver`)
  t.equal(res.status, 202)
  t.match(res.body, { id: first.id, status: 'pending', attempts: 0 })
  await eventually('the second delivery', async () => (hook.got.length >= 2 ? true : undefined))
  t.equal(hook.got[1]!.headers['webhook-id'], event.id)
  t.equal(hook.got[1]!.body, hook.got[0]!.body, 'the same body')
  const [again] = await eventually('the log', async () => {
    const d = await admin.deliveries(key, sub.id)
    return d[0]?.status === 'succeeded' ? d : undefined
  })
  t.equal(again.attempts, 1)
  t.equal(again.attemptLog.length, 2, 'the log keeps the earlier try')

  const other = await admin.newKey('readwrite')
  t.equal((await admin.as(other, 'POST', `/webhooks/${sub.id}/deliveries/${first.id}/redeliver`)).status, 404, "not another key's")
  t.equal((await admin.as(key, 'POST', `/webhooks/${sub.id}/deliveries/whd_nope/redeliver`)).status, 404)
})

t.test('after a secret rotation, deliveries verify with the new secret and the old one during the grace period', async (t) => {
  const admin = await start(t, { WEBHOOK_SECRET_GRACE_MS: '60000' })
  const hook = await receiver(t)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['job.completed'])
  const before = Date.now()
  const rotated = await admin.as(key, 'POST', `/webhooks/${sub.id}/rotate-secret`)
  t.equal(rotated.status, 200)
  t.match(rotated.body.secret, /^whsec_/)
  t.not(rotated.body.secret, sub.secret)
  t.ok(rotated.body.previousSecretValidUntil >= before + 60_000 && rotated.body.previousSecretValidUntil <= Date.now() + 60_000)

  await admin.publish('job.completed', { keyId: key.id })
  const [got] = await eventually('the delivery', async () => hook.got[0] && hook.got)
  t.equal(String(got!.headers['webhook-signature']).split(' ').length, 2, 'two signatures')
  t.ok(new Webhook(rotated.body.secret).verify(got!.body, signedHeaders(got!)), 'the new secret verifies')
  t.ok(new Webhook(sub.secret).verify(got!.body, signedHeaders(got!)), 'the old secret verifies')

  const shown = await admin.as(key, 'GET', `/webhooks/${sub.id}`)
  t.notOk(JSON.stringify(shown.body).includes('whsec_'), 'no secret is shown again')
})

t.test('POST /webhooks/:id/test sends one signed webhook.test now and answers how the receiver took it', async (t) => {
  const admin = await start(t)
  let answer = 204
  const hook = await receiver(t, () => answer)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['job.completed'])

  const before = Date.now()
  const ok = await admin.as(key, 'POST', `/webhooks/${sub.id}/test`)
  t.equal(ok.status, 200)
  t.match(ok.body, { delivered: true, status: 204, durationMs: Number, eventId: /^evt_/, deliveryId: /^whd_/ })
  t.notOk('error' in ok.body)
  t.equal(hook.got.length, 1, 'sent before the answer, once')
  const got = hook.got[0]!
  t.equal(got.headers['webhook-id'], ok.body.eventId)
  const event = new Webhook(sub.secret).verify(got.body, signedHeaders(got)) as any
  t.match(event, { id: ok.body.eventId, type: 'webhook.test', data: { subscriptionId: sub.id, message: String } })
  t.ok(Date.parse(event.timestamp) >= before - 1000)

  answer = 500
  const failing = await admin.as(key, 'POST', `/webhooks/${sub.id}/test`)
  t.equal(failing.status, 200, 'the test was made: its outcome is in the answer')
  t.match(failing.body, { delivered: false, status: 500, error: 'receiver answered 500', response: 'thanks' })

  // the log shows both, ended: nothing is retried
  const log = await admin.deliveries(key, sub.id)
  t.match(log, [
    {
      id: failing.body.deliveryId,
      eventType: 'webhook.test',
      status: 'failed',
      attempts: 1,
      nextAttemptAt: null,
      lastAttempt: { status: 500 },
    },
    {
      id: ok.body.deliveryId,
      eventType: 'webhook.test',
      status: 'succeeded',
      attempts: 1,
      deliveredAt: Number,
      lastAttempt: { status: 204 },
    },
  ])
  await new Promise((resolve) => setTimeout(resolve, 400))
  t.equal(hook.got.length, 2, 'the failed test is not retried')
  t.match((await admin.as(key, 'GET', `/webhooks/${sub.id}`)).body, { enabled: true })
  const redeliver = await admin.as(key, 'POST', `/webhooks/${sub.id}/deliveries/${failing.body.deliveryId}/redeliver`)
  t.equal(redeliver.status, 409, 'a test event is not redelivered')
  t.match(redeliver.body.error, /webhook\.test/)

  // a paused subscription can still be tested: the endpoint is what is tested
  answer = 200
  t.equal((await admin.as(key, 'PATCH', `/webhooks/${sub.id}`, { enabled: false })).status, 200)
  t.match((await admin.as(key, 'POST', `/webhooks/${sub.id}/test`)).body, { delivered: true, status: 200 })
  t.equal(hook.got.length, 3)
})

t.test('a test event to an unreachable URL fails with the reason; another key or an unknown id is 404', async (t) => {
  const admin = await start(t)
  // a port that was just free: nothing listens on it
  const closed = createServer().listen(0, '127.0.0.1')
  await once(closed, 'listening')
  const { port } = closed.address() as AddressInfo
  closed.close()
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, `http://127.0.0.1:${port}/hook`, ['job.completed'])

  const res = await admin.as(key, 'POST', `/webhooks/${sub.id}/test`)
  t.equal(res.status, 200)
  t.match(res.body, { delivered: false, error: /connection failed/, durationMs: Number })
  t.notOk('status' in res.body, 'no answer, no status')
  t.match(await admin.deliveries(key, sub.id), [{ id: res.body.deliveryId, eventType: 'webhook.test', status: 'failed', attempts: 1 }])

  const other = await admin.newKey('readwrite')
  t.equal((await admin.as(other, 'POST', `/webhooks/${sub.id}/test`)).status, 404, "not another key's")
  t.equal((await admin.as(key, 'POST', '/webhooks/whk_nope/test')).status, 404)
  t.equal((await admin.deliveries(key, sub.id)).length, 1, 'nothing was sent for them')
})

t.test('a subscription whose deliveries fail past WEBHOOK_DISABLE_AFTER_MS is disabled, saying why; enabling it starts over', async (t) => {
  const admin = await start(t, { WEBHOOK_DISABLE_AFTER_MS: '200' })
  let answer = 500
  const hook = await receiver(t, () => answer)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['job.failed'])
  await admin.publish('job.failed', { keyId: key.id })

  const disabled = await eventually('the subscription to be disabled', async () => {
    const res = await admin.as(key, 'GET', `/webhooks/${sub.id}`)
    return res.body.enabled ? undefined : res.body
  })
  t.match(disabled.disabledReason, /^disabled 20\d\d-.*: every delivery since 20\d\d-.* failed; last: HTTP 500/)
  const [failed] = await admin.deliveries(key, sub.id)
  t.match(failed, { status: 'failed', attempts: 5, nextAttemptAt: null })

  const count = hook.got.length
  await admin.publish('job.failed', { keyId: key.id })
  await new Promise((resolve) => setTimeout(resolve, 800))
  t.equal(hook.got.length, count, 'nothing is sent to a disabled subscription')

  answer = 200
  const enabled = await admin.as(key, 'PATCH', `/webhooks/${sub.id}`, { enabled: true })
  t.match(enabled.body, { enabled: true, disabledReason: null })
  const newer = await admin.publish('job.failed', { keyId: key.id })
  await eventually('the new event', async () => (hook.got.some((g) => g.headers['webhook-id'] === newer.id) ? true : undefined))
})

t.test('an event published just before admin is killed is delivered once after it starts again', async (t) => {
  // the event the killed admin took comes back to the next one after the fan-out's ack wait
  const first = await start(t, { WEBHOOK_FANOUT_ACK_WAIT_MS: '1000' }, { process: true })
  const hook = await receiver(t)
  const key = await first.newKey('readwrite')
  const sub = await first.subscribe(key, hook.url, ['job.completed'])
  const event = await first.publish('job.completed', { keyId: key.id })
  process.kill(first.svc.pid!, 'SIGKILL')

  const again = await start(t, {}, { env: first.env })
  const [delivery] = await eventually(
    'the delivery after the restart',
    async () => {
      const d = await again.deliveries(key, sub.id)
      return d[0]?.status === 'succeeded' ? d : undefined
    },
    40_000,
  )
  t.equal(delivery.eventId, event.id)
  t.equal((await again.deliveries(key, sub.id)).length, 1, 'one delivery')
  t.ok(hook.got.length >= 1 && hook.got.every((g) => g.headers['webhook-id'] === event.id))
})

t.test('two admin replicas share the fan-out and the sender: each event is delivered once', async (t) => {
  const first = await start(t)
  const second = await start(t, {}, { env: first.env })
  const hook = await receiver(t)
  const key = await first.newKey('readwrite')
  await first.subscribe(key, hook.url, ['swap.confirmed'])
  const published = await Promise.all(
    Array.from({ length: 30 }, (_, i) =>
      (i % 2 ? first : second).publish('swap.confirmed', { keyId: key.id }, { executionId: `exe_${i}` }),
    ),
  )
  await eventually('every delivery', async () => (hook.got.length >= published.length ? true : undefined))
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.same(hook.got.map((g) => g.headers['webhook-id']).sort(), published.map((e) => e.id).sort(), 'each event once')
})

t.test("a job payment voided by its job's failure sends payment.voided to the payer's wallet key", async (t) => {
  const admin = await start(t)
  const hook = await receiver(t)
  const payer = privateKeyToAccount(generatePrivateKey())
  const key = await admin.newKey('readwrite', payer.address)
  const sub = await admin.subscribe(key, hook.url, ['payment.voided', 'payment.settled'])
  const charge = {
    ...(await signCharge(freshAddress(), payer, { route: '/agent/prompt' })),
    method: 'POST',
    jobId: 'job_voided_1',
    settle: 'on-job-complete' as const,
  }
  await admin.publishCharges([charge])
  const verdict = {
    jobId: charge.jobId,
    payer: payer.address.toLowerCase(),
    nonce: charge.authorization.nonce,
    at: Date.now(),
    outcome: 'void' as const,
    status: 'failed' as const,
    reason: 'the model gave up',
  }
  await admin.js.publish(admin.payments.jobOutcome.subject, admin.payments.jobOutcome.message.encode(verdict), { msgID: verdict.jobId })

  const [got] = await eventually('payment.voided', async () => hook.got[0] && hook.got)
  const body = new Webhook(sub.secret).verify(got!.body, signedHeaders(got!)) as { type: string; data: Record<string, unknown> }
  t.equal(body.type, 'payment.voided')
  t.same(body.data, {
    payer: payer.address.toLowerCase(),
    nonce: charge.authorization.nonce,
    amount: charge.authorization.value,
    asset: charge.asset,
    network: charge.network,
    chainId: charge.chainId,
    route: '/agent/prompt',
    jobId: 'job_voided_1',
    reason: 'the model gave up',
  })
})

t.test("a settled payment sends payment.settled, with its transaction, to the payer's wallet key", async (t) => {
  const chain = await devnetUsdc()
  const admin = await start(t, { ...chain.env, SETTLEMENT_INTERVAL_MS: '100' })
  const hook = await receiver(t)
  const payer = await chain.fundedPayer(50_000n)
  const key = await admin.newKey('readwrite', payer.address)
  const sub = await admin.subscribe(key, hook.url, ['payment.settled'])
  const charge = await signCharge(chain.usdc, payer, { value: 10_000n })
  await admin.publishCharges([charge])

  const [got] = await eventually('payment.settled', async () => hook.got[0] && hook.got, 30_000)
  const body = new Webhook(sub.secret).verify(got!.body, signedHeaders(got!)) as { type: string; data: Record<string, unknown> }
  const [settled] = await admin.paymentsWhen('the payment to be settled', (p) => p[0]?.settlement === 'settled')
  t.equal(body.type, 'payment.settled')
  t.same(body.data, {
    payer: payer.address.toLowerCase(),
    nonce: charge.authorization.nonce,
    amount: '10000',
    asset: chain.usdc,
    network: charge.network,
    chainId: charge.chainId,
    route: charge.route,
    txHash: settled!.txHash,
  })
})

t.test('subscription routes: URL rules, limits and ownership', async (t) => {
  const admin = await start(t, { WEBHOOK_ALLOW_HTTP: 'false', WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'false', WEBHOOK_MAX_PER_KEY: '2' })
  const key = await admin.newKey('readwrite')
  const other = await admin.newKey('readwrite')

  for (const url of [
    'http://example.com/hook',
    'https://127.0.0.1/hook',
    'https://169.254.169.254/latest',
    'https://10.0.0.1/hook',
    'https://localhost/hook',
  ]) {
    const res = await admin.as(key, 'POST', '/webhooks', { url, events: ['job.completed'] })
    t.equal(res.status, 400, url)
    t.type(res.body.error, 'string', url)
  }
  const bad = await admin.as(key, 'POST', '/webhooks', { url: 'https://8.8.8.8/hook', events: [] })
  t.equal(bad.status, 400, 'at least one event')
  const dup = await admin.as(key, 'POST', '/webhooks', { url: 'https://8.8.8.8/hook', events: ['job.completed', 'job.completed'] })
  t.equal(dup.status, 400, 'events are unique')
  const unknown = await admin.as(key, 'POST', '/webhooks', { url: 'https://8.8.8.8/hook', events: ['job.exploded'] })
  t.equal(unknown.status, 400, 'a known event type')

  const a = await admin.as(key, 'POST', '/webhooks', { url: 'https://8.8.8.8/a', events: ['job.completed'], description: 'ops' })
  t.equal(a.status, 201)
  t.equal((await admin.as(key, 'POST', '/webhooks', { url: 'https://8.8.8.8/b', events: ['job.failed'] })).status, 201)
  const third = await admin.as(key, 'POST', '/webhooks', { url: 'https://8.8.8.8/c', events: ['job.failed'] })
  t.equal(third.status, 409)
  t.match(third.body.error, /WEBHOOK_MAX_PER_KEY/)
  const theirs = await admin.as(other, 'POST', '/webhooks', { url: 'https://8.8.4.4/x', events: ['job.failed'] })
  t.equal(theirs.status, 201)

  t.equal((await admin.as(key, 'GET', '/webhooks')).body.webhooks.length, 2, 'a key lists its own')
  const all = await admin.as(undefined, 'GET', '/webhooks')
  t.same(
    all.body.webhooks.map((w: { keyId: string }) => w.keyId).sort(),
    [key.id, key.id, other.id].sort(),
    'an admin key lists all, with keyId',
  )
  t.notOk(JSON.stringify(all.body).includes('whsec_'), 'no secrets in lists')

  for (const [method, path, body] of [
    ['GET', `/webhooks/${theirs.body.id}`],
    ['PATCH', `/webhooks/${theirs.body.id}`, { enabled: false }],
    ['DELETE', `/webhooks/${theirs.body.id}`],
    ['POST', `/webhooks/${theirs.body.id}/rotate-secret`],
    ['GET', `/webhooks/${theirs.body.id}/deliveries`],
  ] as Array<[string, string, unknown?]>) {
    const res = await admin.as(key, method, path, body)
    t.equal(res.status, 404, `${method} ${path} of another key`)
    t.match(res.body.error, /not found/)
  }
  t.equal((await admin.as(undefined, 'GET', `/webhooks/${theirs.body.id}`)).status, 200, 'an admin key sees it')

  const patched = await admin.as(key, 'PATCH', `/webhooks/${a.body.id}`, { events: ['job.cancelled'], description: null })
  t.match(patched.body, { events: ['job.cancelled'], description: null })
  t.equal(
    (await admin.as(key, 'PATCH', `/webhooks/${a.body.id}`, { url: 'https://127.0.0.1/x' })).status,
    400,
    'a changed URL is checked too',
  )
  t.equal((await admin.as(key, 'DELETE', `/webhooks/${a.body.id}`)).status, 204)
  t.equal((await admin.as(key, 'GET', `/webhooks/${a.body.id}`)).status, 404, 'deleted')
})

/** long enough for a try due in `ms` (±20% jitter) to have been made, with the sender's poll */
const pastATryIn = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms * 1.2 + 800))

t.test("revoking a key disables its subscriptions and cancels their pending deliveries; other keys' go on", async (t) => {
  const admin = await start(t, { WEBHOOK_RETRY_SCHEDULE: '1s,1s,1s' })
  const failing = await receiver(t, () => 500)
  const other = await receiver(t)
  const key = await admin.newKey('readwrite')
  const bystander = await admin.newKey('readwrite')
  const first = await admin.subscribe(key, failing.url, ['job.failed'])
  const second = await admin.subscribe(key, failing.url, ['job.failed'])
  await admin.as(key, 'PATCH', `/webhooks/${second.id}`, { enabled: false })
  const theirs = await admin.subscribe(bystander, other.url, ['job.failed'])
  await admin.publish('job.failed', { keyId: key.id })
  await eventually('the first try', async () => (failing.got.length === 1 ? true : undefined))
  await eventually('the delivery to wait for its next try', async () =>
    (await admin.deliveries(key, first.id))[0]?.attempts === 1 ? true : undefined,
  )

  const revoked = await admin.as(undefined, 'DELETE', `/admin/keys/${key.id}`)
  t.equal(revoked.status, 200)
  await pastATryIn(1_000)
  t.equal(failing.got.length, 1, 'nothing is sent after the revocation')

  for (const sub of [first, second]) {
    const res = await admin.as(undefined, 'GET', `/webhooks/${sub.id}`)
    t.match(res.body, { enabled: false, disabledReason: new RegExp(`^disabled 20\\d\\d-.*: key revoked \\(${key.id}\\)$`) }, sub.id)
  }
  const [cancelled] = await admin.deliveries(undefined, first.id)
  t.match(cancelled, {
    status: 'cancelled',
    attempts: 1,
    nextAttemptAt: null,
    cancelReason: /^cancelled: key revoked 20\d\d-.*, nothing more is sent$/,
  })
  t.equal(cancelled.attemptLog.length, 1, 'the try before the revocation stays in the log')

  await admin.publish('job.failed', { keyId: bystander.id })
  await eventually("another key's delivery", async () => (other.got.length === 1 ? true : undefined))
  t.match((await admin.as(bystander, 'GET', `/webhooks/${theirs.id}`)).body, { enabled: true, disabledReason: null })
})

t.test('a delivery whose key is found revoked when it is due is cancelled, not sent, and its subscription disabled', async (t) => {
  const admin = await start(t, { WEBHOOK_RETRY_SCHEDULE: '1s,1s,1s' })
  const hook = await receiver(t, () => 500)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['job.failed'])
  await admin.publish('job.failed', { keyId: key.id })
  await eventually('the delivery to wait for its next try', async () =>
    (await admin.deliveries(key, sub.id))[0]?.attempts === 1 ? true : undefined,
  )
  // a revocation whose webhook step did not happen (it raced the sender, or came from elsewhere)
  await admin.sql('UPDATE admin.api_keys SET revoked_at = now() WHERE id = $1', [key.id])

  await pastATryIn(1_000)
  t.equal(hook.got.length, 1, 'the sender checks the key before it sends')
  const [cancelled] = await admin.deliveries(undefined, sub.id)
  t.match(cancelled, { status: 'cancelled', attempts: 1, cancelReason: /key revoked/ })
  t.match((await admin.as(undefined, 'GET', `/webhooks/${sub.id}`)).body, { enabled: false, disabledReason: /key revoked/ })
})

t.test('a delivery queued after its key was revoked (a fan-out that raced the revocation) is cancelled, not sent', async (t) => {
  const admin = await start(t)
  const hook = await receiver(t)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['job.failed'])
  t.equal((await admin.as(undefined, 'DELETE', `/admin/keys/${key.id}`)).status, 200)
  // the row a fan-out writes when it read the subscription just before the revocation committed
  await admin.sql(
    `INSERT INTO admin.webhook_deliveries (id, subscription_id, event_id, event_type, body) VALUES ('whd_raced', $1, 'evt_raced', 'job.failed', '{}')`,
    [sub.id],
  )
  const [cancelled] = await eventually('the raced delivery to be cancelled', async () => {
    const d = await admin.deliveries(undefined, sub.id)
    return d[0]?.status === 'cancelled' ? d : undefined
  })
  t.match(cancelled, { id: 'whd_raced', attempts: 0, cancelReason: /key revoked/ })
  t.equal(hook.got.length, 0, 'nothing was sent')
})

t.test("a revoked key's subscription is read or deleted only: change, rotate, test and redeliver answer 409", async (t) => {
  const admin = await start(t)
  const hook = await receiver(t)
  const key = await admin.newKey('readwrite')
  const sub = await admin.subscribe(key, hook.url, ['job.failed'])
  await admin.publish('job.failed', { keyId: key.id })
  const [delivered] = await eventually('the delivery', async () => {
    const d = await admin.deliveries(key, sub.id)
    return d[0]?.status === 'succeeded' ? d : undefined
  })
  t.equal((await admin.as(undefined, 'DELETE', `/admin/keys/${key.id}`)).status, 200)
  t.equal((await admin.deliveries(undefined, sub.id))[0].status, 'succeeded', 'a delivered delivery stays delivered')

  for (const [method, path, body] of [
    ['PATCH', `/webhooks/${sub.id}`, { enabled: true }],
    ['PATCH', `/webhooks/${sub.id}`, { enabled: false }],
    ['PATCH', `/webhooks/${sub.id}`, { events: ['job.completed'] }],
    ['POST', `/webhooks/${sub.id}/rotate-secret`],
    ['POST', `/webhooks/${sub.id}/test`],
    ['POST', `/webhooks/${sub.id}/deliveries/${delivered.id}/redeliver`],
  ] as Array<[string, string, unknown?]>) {
    const res = await admin.as(undefined, method, path, body)
    t.equal(res.status, 409, `${method} ${path}`)
    t.equal(
      res.body.error,
      `webhook ${sub.id} belongs to key ${key.id}, which was revoked: it stays disabled and is not changed, tested or redelivered (it can be read or deleted)`,
    )
  }
  t.equal(hook.got.length, 1, 'nothing more was sent')
  t.match((await admin.as(undefined, 'GET', `/webhooks/${sub.id}`)).body, { enabled: false, disabledReason: /key revoked/ })
  t.equal((await admin.as(undefined, 'DELETE', `/webhooks/${sub.id}`)).status, 204)
})

t.test("rotating ADMIN_API_KEY retires the old bootstrap key's webhooks with it", async (t) => {
  const first = await start(t, { ADMIN_API_KEY: 'atsk_webhook-bootstrap-key-0000000000' })
  const hook = await receiver(t)
  const keys = (await first.as(undefined, 'GET', '/admin/keys')).body.keys as Array<{ id: string; label: string }>
  const bootstrap = keys.find((k) => k.label === 'bootstrap (ADMIN_API_KEY)')!
  const sub = await first.subscribe({ id: bootstrap.id, tier: 'admin', wallet: null }, hook.url, ['job.failed'])

  const second = await start(t, {}, { env: { ...first.env, ADMIN_API_KEY: 'atsk_webhook-rotated-key-000000000000' } })
  t.match((await second.as(undefined, 'GET', `/webhooks/${sub.id}`)).body, {
    enabled: false,
    disabledReason: new RegExp(`key revoked \\(${bootstrap.id}\\)`),
  })
})
