import { agentService } from '@ats/agent/service'
import { baseTestEnv, startService } from '@ats/service-kit/testing'
import t from 'tap'
import { adminKey, eventually, startFleet, startReceiver } from '../fleet.ts'

/**
 * Revoking a key ends its webhooks, through the gateway: a readwrite key subscribes, a /v1 prompt
 * of that key completes in the agent, and the job.completed event travels the agent's outbox, the
 * events stream and admin's sender to a local receiver that answers 500, so the delivery waits
 * for its next try. An admin then revokes the key: nothing more reaches the receiver, the
 * subscription is disabled saying why, and the delivery log says why the delivery was not sent.
 */
t.test('revoking a key ends its webhooks', async (t) => {
  const env = await baseTestEnv(t)
  const agent = await startService(t, agentService, env)
  // tries 2 s apart (±20%): a test revokes between two of them
  const retryMs = 2_000
  const fleet = await startFleet(t, {
    env,
    gatewayEnv: { AGENT_URL: agent.url },
    adminEnv: {
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'true',
      WEBHOOK_RETRY_SCHEDULE: '2s,2s,2s',
      WEBHOOK_POLL_MS: '100',
    },
  })
  const { request, createKey } = fleet

  /** a readwrite key subscribed to its jobs' events at `url`, and one /v1 prompt of that key that ends */
  async function subscribedKeyWithAJob(url: string) {
    const key = await createKey('readwrite', 'webhook client')
    const hook = await request('/webhooks', { method: 'POST', key: key.key, body: { url, events: ['job.completed', 'job.failed'] } })
    if (hook.status !== 201) throw new Error(`POST /webhooks answered ${hook.status}: ${JSON.stringify(hook.body)}`)
    const completion = await request('/v1/chat/completions', {
      method: 'POST',
      key: key.key,
      body: { model: 'ats-planner', messages: [{ role: 'user', content: 'hello' }] },
    })
    if (completion.status !== 200) throw new Error(`the prompt answered ${completion.status}: ${JSON.stringify(completion.body)}`)
    return { key, hook: hook.body as { id: string } }
  }

  const revoke = (keyId: string) => request(`/admin/keys/${keyId}`, { method: 'DELETE', key: adminKey })
  /** long enough for every try of the retry schedule left to be due */
  const pastTheNextTries = () => new Promise((resolve) => setTimeout(resolve, retryMs * 1.2 + 1_500))

  t.test('a delivery waiting for its next try is not sent once its key is revoked; the log says why', async (t) => {
    const receiver = await startReceiver(t, () => 500)
    const { key, hook } = await subscribedKeyWithAJob(receiver.url('/failing'))
    await eventually('the first try', async () => (receiver.received.length > 0 ? true : undefined), 30_000)
    const [waiting] = await eventually('the delivery to wait for its next try', async () => {
      const log = await request(`/webhooks/${hook.id}/deliveries`, { key: key.key })
      return log.body.deliveries?.[0]?.attempts === 1 ? log.body.deliveries : undefined
    })
    t.match(waiting, { status: 'pending', attempts: 1, nextAttemptAt: Number })

    t.equal((await revoke(key.id)).status, 200)
    const tries = receiver.received.length
    await pastTheNextTries()
    t.equal(receiver.received.length, tries, 'nothing reaches the receiver after the revocation')

    const sub = await request(`/webhooks/${hook.id}`, { key: adminKey })
    t.equal(sub.status, 200)
    t.match(sub.body, { enabled: false, disabledReason: /key revoked/ }, 'the subscription is disabled, saying why')
    const log = await request(`/webhooks/${hook.id}/deliveries`, { key: adminKey })
    t.match(log.body.deliveries, [{ id: waiting.id, status: 'cancelled', attempts: 1, nextAttemptAt: null, cancelReason: /key revoked/ }])
    const cancelled = await request(`/webhooks/${hook.id}/deliveries?status=cancelled`, { key: adminKey })
    t.equal(cancelled.body.deliveries?.length, 1, 'the log can be filtered for cancelled deliveries')
  })

  t.test('a delivery in flight when its key is revoked is not tried again', async (t) => {
    let answer!: (status: number) => void
    const held = new Promise<number>((resolve) => {
      answer = resolve
    })
    const receiver = await startReceiver(t, () => held)
    const { key, hook } = await subscribedKeyWithAJob(receiver.url('/held'))
    await eventually('the first try', async () => (receiver.received.length > 0 ? true : undefined), 30_000)

    t.equal((await revoke(key.id)).status, 200)
    answer(500)
    await pastTheNextTries()
    t.equal(receiver.received.length, 1, 'the try under way was the last')
    const log = await request(`/webhooks/${hook.id}/deliveries`, { key: adminKey })
    t.match(log.body.deliveries, [{ status: 'cancelled', attempts: 1, cancelReason: /key revoked/, lastAttempt: { status: 500 } }])
  })

  t.test("an admin cannot enable, test or redeliver a revoked key's subscription: 409 saying why", async (t) => {
    const receiver = await startReceiver(t)
    const { key, hook } = await subscribedKeyWithAJob(receiver.url('/ok'))
    const [delivered] = await eventually('the delivery', async () => {
      const log = await request(`/webhooks/${hook.id}/deliveries`, { key: key.key })
      return log.body.deliveries?.[0]?.status === 'succeeded' ? log.body.deliveries : undefined
    })
    t.equal((await revoke(key.id)).status, 200)
    const count = receiver.received.length

    const redeliver = await request(`/webhooks/${hook.id}/deliveries/${delivered.id}/redeliver`, { method: 'POST', key: adminKey })
    t.equal(redeliver.status, 409)
    t.match(redeliver.body.error, new RegExp(`${key.id}.*revoked`))
    const tested = await request(`/webhooks/${hook.id}/test`, { method: 'POST', key: adminKey })
    t.equal(tested.status, 409)
    t.match(tested.body.error, /revoked/)
    const enabled = await request(`/webhooks/${hook.id}`, { method: 'PATCH', key: adminKey, body: { enabled: true } })
    t.equal(enabled.status, 409)
    t.match(enabled.body.error, /revoked/)
    t.equal(receiver.received.length, count, 'nothing was sent')
    t.match((await request(`/webhooks/${hook.id}`, { key: adminKey })).body, { enabled: false, disabledReason: /key revoked/ })
    t.equal((await request(`/webhooks/${hook.id}`, { method: 'DELETE', key: adminKey })).status, 204, 'it can still be deleted')
  })
})
