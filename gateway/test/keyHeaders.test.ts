import { hashApiKey, natsChannels } from '@ats/contracts'
import { addNatsService, createService, serveEndpoint } from '@ats/service-kit'
import { baseTestEnv } from '@ats/service-kit/testing'
import Fastify from 'fastify'
import { connect } from 'nats'
import { pino } from 'pino'
import t from 'tap'
import { gatewayService } from '../src/service.ts'

// Where the gateway reads an API key: Authorization: Bearer on every key route, and x-api-key
// (Anthropic's SDKs) on /v1/messages only. The whole gateway in process, before a probe upstream
// that echoes what it gets; admin's key lookup (admin.keys.verify, over NATS) answered for two keys.
const writer = `atsk_${'w'.repeat(32)}`
const reader = `atsk_${'r'.repeat(32)}`
const known: Record<string, { id: string; tier: 'readwrite' | 'readonly' }> = {
  [hashApiKey(writer)]: { id: 'key_writer', tier: 'readwrite' },
  [hashApiKey(reader)]: { id: 'key_reader', tier: 'readonly' },
}

const probe = Fastify()
probe.all('/*', async (request) => ({ path: request.url, headers: request.headers }))
t.teardown(() => probe.close())
const probeUrl = await probe.listen({ port: 0, host: '127.0.0.1' })

const env = await baseTestEnv(t)
const nc = await connect({ servers: env.NATS_URL! })
t.teardown(() => nc.close())
const keyService = await addNatsService(nc, 'admin', '0.0.1', 'key lookups of the test')
serveEndpoint(keyService, 'keys-verify', natsChannels(env.NATS_NAMESPACE!).admin.keyVerify, pino({ level: 'silent' }), async ({ hash }) => {
  const key = known[hash]
  return { key: key ? { ...key, wallet: null } : null }
})

const gateway = await createService(gatewayService, { ...env, AGENT_URL: probeUrl, MARKET_DATA_URL: probeUrl })
t.teardown(() => gateway.close())
const send = (url: string, headers: Record<string, string>) =>
  gateway.app.inject({ method: url.startsWith('/v1') ? 'POST' : 'GET', url, headers: { 'content-type': 'application/json', ...headers }, payload: url.startsWith('/v1') ? '{}' : undefined })

t.test('/v1/messages takes the key from x-api-key, and never forwards it', async (t) => {
  const res = await send('/v1/messages', { 'x-api-key': writer, 'anthropic-version': '2023-06-01' })
  t.equal(res.statusCode, 200)
  const seen = res.json().headers
  t.equal(seen['x-ats-key-id'], 'key_writer', 'the key is the caller')
  t.notOk(seen['x-api-key'], 'the credential stays at the gateway')
  t.notOk(seen.authorization)
  t.equal(seen['anthropic-version'], '2023-06-01', 'other headers pass')
  const bearer = await send('/v1/messages', { authorization: `Bearer ${writer}` })
  t.equal(bearer.json().headers['x-ats-key-id'], 'key_writer', 'Authorization: Bearer works too')
})

t.test("/v1/messages failures at the gateway are Anthropic's shape", async (t) => {
  const none = await send('/v1/messages', {})
  t.equal(none.statusCode, 401)
  t.same(none.json(), { type: 'error', error: { type: 'authentication_error', message: 'missing API key: send x-api-key: <key> or Authorization: Bearer <key>' } })
  const malformed = await send('/v1/messages', { 'x-api-key': 'sk-ant-not-ours' })
  t.equal(malformed.statusCode, 401)
  t.match(malformed.json(), { type: 'error', error: { type: 'authentication_error', message: /malformed API key/ } })
  const unknown = await send('/v1/messages', { 'x-api-key': `atsk_${'u'.repeat(32)}` })
  t.equal(unknown.statusCode, 401)
  t.match(unknown.json(), { error: { type: 'authentication_error', message: 'invalid or revoked API key' } })
  const readonly = await send('/v1/messages', { 'x-api-key': reader })
  t.equal(readonly.statusCode, 403)
  t.match(readonly.json(), { type: 'error', error: { type: 'permission_error', message: /needs an API key of tier readwrite/ } })
})

t.test('x-api-key is no key anywhere else', async (t) => {
  const market = await send('/market/prices', { 'x-api-key': reader })
  t.equal(market.statusCode, 401)
  t.same(market.json(), { error: 'missing API key: send Authorization: Bearer <key>' })
  t.equal((await send('/market/prices', { authorization: `Bearer ${reader}` })).statusCode, 200, 'the same key as Bearer passes')
  const chat = await send('/v1/chat/completions', { 'x-api-key': writer })
  t.equal(chat.statusCode, 401)
  t.match(chat.json(), { error: { code: 'invalid_api_key', message: 'missing API key: send Authorization: Bearer <key>' } }, "the rest of /v1 stays OpenAI's")
})
