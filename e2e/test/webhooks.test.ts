import { Webhook } from 'standardwebhooks'
import t from 'tap'
import { eventually, startAgentFleet, startReceiver } from './fleet.ts'

/**
 * Webhooks through the gateway: a readwrite key subscribes with POST /webhooks, a /v1 prompt of
 * that key completes in the agent, and the job.completed event travels the agent's outbox, the
 * events stream and admin's sender to a local receiver (development settings: http, loopback).
 */
const fleet = await startAgentFleet(t, {
  adminEnv: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'true', WEBHOOK_RETRY_SCHEDULE: '100ms,100ms,100ms' },
})
const { request, createKey } = fleet

const { received, url: hookUrl } = await startReceiver(t)

t.test('the gateway lists the webhook routes in its OpenAPI document', async (t) => {
  const docs = await request('/openapi.json')
  for (const path of ['/webhooks', '/webhooks/{id}', '/webhooks/{id}/rotate-secret', '/webhooks/{id}/deliveries', '/webhooks/{id}/deliveries/{deliveryId}/redeliver']) {
    t.ok(docs.body.paths[path], path)
  }
})

t.test('a /v1 prompt that completes is pushed to its key as a signed job.completed, and to no other key', async (t) => {
  const writer = await createKey('readwrite', 'webhook client')
  const stranger = await createKey('readwrite', 'someone else')
  const mine = await request('/webhooks', { method: 'POST', key: writer.key, body: { url: hookUrl('/mine'), events: ['job.completed'] } })
  t.equal(mine.status, 201)
  const theirs = await request('/webhooks', { method: 'POST', key: stranger.key, body: { url: hookUrl('/theirs'), events: ['job.completed'] } })
  t.equal(theirs.status, 201)
  const readonly = await createKey('readonly', 'reader')
  t.equal((await request('/webhooks', { key: readonly.key })).status, 403, 'a readonly key cannot subscribe')

  const completion = await request('/v1/chat/completions', {
    method: 'POST',
    key: writer.key,
    body: { model: 'ats-planner', messages: [{ role: 'user', content: 'What is the price of ARB?' }] },
  })
  t.equal(completion.status, 200)

  const got = await eventually('the job.completed delivery', async () => received.find((r) => r.body.includes('"job.completed"')), 30_000)
  const event = new Webhook(mine.body.secret).verify(got.body, got.headers as Record<string, string>) as { id: string; type: string; data: Record<string, any> }
  t.equal(event.type, 'job.completed')
  t.equal(got.headers['webhook-id'], event.id)
  t.match(event.data, { jobId: String, status: 'complete', prompt: 'What is the price of ARB?' })

  const log = await request(`/webhooks/${mine.body.id}/deliveries`, { key: writer.key })
  t.equal(log.status, 200)
  t.match(log.body.deliveries, [{ eventId: event.id, eventType: 'job.completed', status: 'succeeded', attempts: 1 }])
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.equal(received.filter((r) => r.body.includes('"job.completed"')).length, 1, 'one delivery: the other key got nothing')
  t.equal((await request(`/webhooks/${mine.body.id}`, { key: stranger.key })).status, 404, "another key cannot see it")
})
