// The gateway's edge, in this process: its settings refused or taken at start, what its public and
// operations ports answer (also bound as pnpm start binds them), the alert rules against the
// metrics it exports, failed authentications, 402s, and where it reads an API key (x-api-key).
import { readFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { networkInterfaces } from 'node:os'
import { hashApiKey, natsChannels } from '@ats/contracts'
import { addNatsService, createService, loadConfig, serveEndpoint, StartupError } from '@ats/service-kit'
import { baseTestEnv, testInfra } from '@ats/service-kit/testing'
import Fastify from 'fastify'
import { connect } from 'nats'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { parse } from 'yaml'
import { memberEnv } from '@ats/fleet'
import { gatewayService } from '../src/service.ts'
import { gatewaySettings, trustProxyOf } from '../src/settings.ts'

// a gateway alone, tested without a socket
/** A gateway alone (no admin answers its key lookups), tested without a socket. */
async function gateway(t: Test, env: NodeJS.ProcessEnv = {}) {
  const svc = await createService(gatewayService, { ...(await baseTestEnv(t)), ...env })
  t.teardown(() => svc.close())
  return svc
}

t.test('/ready and /metrics answer on the operations port only, never on the public one', async (t) => {
  const svc = await gateway(t)
  t.equal((await svc.app.inject({ url: '/ready' })).statusCode, 404)
  t.equal((await svc.app.inject({ url: '/metrics' })).statusCode, 404)
  t.equal((await svc.app.inject({ url: '/health' })).statusCode, 200, 'liveness stays public')
  const ready = await svc.ops.inject({ url: '/ready' })
  t.equal(ready.statusCode, 200)
  t.match(ready.json(), { ready: true, checks: ['nats'] })
  const metrics = await svc.ops.inject({ url: '/metrics' })
  t.equal(metrics.statusCode, 200)
  t.match(metrics.body, /http_request_duration_seconds/)
})

t.test('a key that does not match the key format gets 401 without asking admin', async (t) => {
  const svc = await gateway(t)
  const res = await svc.app.inject({ url: '/market/prices', headers: { authorization: 'Bearer atsk_too-short-to-be-a-key' } })
  t.equal(res.statusCode, 401, 'no admin runs here: a lookup would have answered 503')
  t.same(res.json(), { error: 'malformed API key: keys are atsk_ followed by 32 characters' })
  const wellFormed = await svc.app.inject({ url: '/market/prices', headers: { authorization: `Bearer atsk_${'x'.repeat(32)}` } })
  t.equal(wellFormed.statusCode, 503, 'a well-formed key is looked up, and admin is not there')
})

t.test('a flood of failed authentications from one address gets 429 with retry-after; other addresses do not', async (t) => {
  const svc = await gateway(t, { AUTH_FAILURE_LIMIT: '3' })
  const attempt = (remoteAddress: string) =>
    svc.app.inject({ url: '/swap/quote', remoteAddress, headers: { authorization: 'Bearer atsk_guess' } })
  for (let i = 0; i < 3; i++) t.equal((await attempt('203.0.113.7')).statusCode, 401, `failure ${i + 1} is a plain 401`)
  const refused = await attempt('203.0.113.7')
  t.equal(refused.statusCode, 429)
  t.match(refused.json(), { error: /^too many failed authentications from this address; retry in \d+ s$/ })
  t.ok(Number(refused.headers['retry-after']) > 0, 'retry-after says when')
  t.equal((await attempt('198.51.100.1')).statusCode, 401, 'another address is not affected')
})

t.test('the 402 names the resource from PUBLIC_URL, never from the Host a client sends', async (t) => {
  // Arbitrum One's address book is built in: no chain is needed to answer a 402
  const paid = {
    CHAIN_ID: '42161',
    PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720',
    RPC_URL: 'http://127.0.0.1:9',
    REDIS_URL: (await testInfra()).redisUrl,
  }
  const bare = await gateway(t, paid)
  const spoofed = await bare.app.inject({ url: '/agent/skills', headers: { host: 'evil.example' } })
  t.equal(spoofed.statusCode, 402)
  t.notMatch(spoofed.body, /evil\.example/)
  t.match(spoofed.json().accepts[0].resource, /^http:\/\/localhost:\d+\/agent\/skills$/)
  const configured = await gateway(t, { ...paid, PUBLIC_URL: 'https://api.example.com' })
  const res = await configured.app.inject({ url: '/agent/skills', headers: { host: 'evil.example' } })
  t.equal(res.json().accepts[0].resource, 'https://api.example.com/agent/skills')
})

t.test('SKIP_PAYMENT=true is refused at start on Arbitrum One', async (t) => {
  await t.rejects(
    gateway(t, { SKIP_PAYMENT: 'true', CHAIN_ID: '42161', PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720' }),
    StartupError,
  )
  await t.rejects(gateway(t, { SKIP_PAYMENT: 'true', CHAIN_ID: '42161' }), /SKIP_PAYMENT=true is refused on Arbitrum One/)
})

t.test(
  'paid routes refuse to start without Redis: nonces per process could be replayed on another replica or after a restart',
  async (t) => {
    const paid = { CHAIN_ID: '42161', PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720', RPC_URL: 'http://127.0.0.1:9' }
    await t.rejects(gateway(t, paid), { name: 'StartupError', message: /^paid routes need Redis: set REDIS_URL/ })
    const free = await gateway(t)
    t.equal(
      (await free.app.inject({ url: '/health' })).statusCode,
      200,
      'a gateway without paid routes (no PAY_TO) still starts without Redis',
    )
  },
)

// settings checked at start
const { TRUST_PROXY, PAY_TO, AGENT_URL } = gatewaySettings
const settings = { TRUST_PROXY, PAY_TO, AGENT_URL }

t.test('values that used to start and then fail are refused at start, naming the setting', async (t) => {
  const refused: Array<[NodeJS.ProcessEnv, RegExp]> = [
    [
      { TRUST_PROXY: 'yes' },
      /^invalid setting TRUST_PROXY: must be false, true, a hop count, or comma-separated addresses\/CIDRs \("yes" is none of them\)/,
    ],
    [{ TRUST_PROXY: '10.0.0.0/8,proxy.internal' }, /"proxy.internal" is none of them/],
    [
      { PAY_TO: '0xA0Ee7A142d267C1f36714E4a8F75612F20a79720' },
      /^invalid setting PAY_TO: must be a 0x address whose mixed case is a valid EIP-55 checksum/,
    ],
    [{ AGENT_URL: 'localhost:3001' }, /^invalid setting AGENT_URL: must be an absolute http\(s\) URL/],
  ]
  for (const [env, message] of refused) {
    const error = t.throws(() => loadConfig(settings, env), JSON.stringify(env)) as Error
    t.type(error, StartupError)
    t.match(error.message, message)
  }
})

t.test('good values pass as they are', async (t) => {
  const config = loadConfig(settings, {
    TRUST_PROXY: '10.0.0.0/8, 192.168.1.1,loopback,::1',
    PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720',
    AGENT_URL: 'http://agent:3001',
  })
  t.same(config, {
    TRUST_PROXY: '10.0.0.0/8, 192.168.1.1,loopback,::1',
    PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720',
    AGENT_URL: 'http://agent:3001',
  })
  t.equal(
    loadConfig(settings, { PAY_TO: '0xa0ee7a142d267c1f36714e4a8f75612f20a79720' }).PAY_TO,
    '0xa0ee7a142d267c1f36714e4a8f75612f20a79720',
    'lower case has no checksum to check',
  )
  t.equal(trustProxyOf(loadConfig(settings, { TRUST_PROXY: '2' }).TRUST_PROXY), 2)
})

// the operations port: which address it is bound to
t.test('pnpm start binds the operations port (/ready, /metrics) to loopback; the public port follows HOST', async (t) => {
  const { env } = memberEnv({ name: 'gateway', dir: '', definition: gatewayService }, {}, {})
  t.match(env, { HOST: '0.0.0.0', OPS_HOST: '127.0.0.1' })
  t.equal(
    memberEnv({ name: 'gateway', dir: '', definition: gatewayService }, {}, { OPS_HOST: '0.0.0.0' }).env.OPS_HOST,
    '0.0.0.0',
    'unless OPS_HOST says otherwise',
  )

  const svc = await createService(gatewayService, {
    ...(await baseTestEnv(t)),
    HOST: env.HOST,
    OPS_HOST: env.OPS_HOST,
    PORT: '0',
    OPS_PORT: '0',
  })
  t.teardown(() => svc.close())
  await svc.listen()
  const ops = svc.ops.server.address() as AddressInfo
  const app = svc.app.server.address() as AddressInfo
  t.equal(ops.address, '127.0.0.1')
  t.equal(app.address, '0.0.0.0')
  t.equal((await fetch(`http://127.0.0.1:${ops.port}/ready`)).status, 200)
  // from another interface of this machine, when it has one: the public port answers, the operations port does not
  const external = Object.values(networkInterfaces())
    .flat()
    .find((entry) => entry?.family === 'IPv4' && !entry.internal)
  if (external) {
    t.equal((await fetch(`http://${external.address}:${app.port}/health`)).status, 200)
    await t.rejects(fetch(`http://${external.address}:${ops.port}/ready`), 'the operations port is not on it')
  }
})

t.test('without OPS_HOST (compose, k8s) the operations port follows HOST, where their probes reach it', async (t) => {
  const svc = await createService(gatewayService, { ...(await baseTestEnv(t)), HOST: '0.0.0.0', PORT: '0', OPS_PORT: '0' })
  t.teardown(() => svc.close())
  await svc.listen()
  t.equal((svc.ops.server.address() as AddressInfo).address, '0.0.0.0')
})

// the alert rules
interface Rule {
  alert: string
  expr: string
  for?: string
  labels: { severity: string }
  annotations: { summary: string }
}

// PromQL words that are not metric names
const promql = new Set([
  'sum',
  'by',
  'rate',
  'max',
  'histogram_quantile',
  'changes',
  'up',
  'le',
  'service',
  'instance',
  'job',
  'route',
  'status',
  'without',
  'on',
  'and',
  'or',
])

t.test('the alert rules are valid rule groups, and every metric they use is exported', async (t) => {
  const file = await readFile(new URL('../../k8s/monitoring/prometheus-rules.yaml', import.meta.url), 'utf8')
  const { groups } = parse(file) as { groups: Array<{ name: string; rules: Rule[] }> }
  t.ok(groups.length > 0)
  const rules = groups.flatMap((g) => g.rules)
  t.equal(new Set(rules.map((r) => r.alert)).size, rules.length, 'alert names are unique')
  for (const rule of rules) {
    t.match(
      rule,
      { alert: /^[A-Z][A-Za-z]+$/, expr: String, labels: { severity: /^(page|ticket)$/ }, annotations: { summary: String } },
      rule.alert,
    )
    if (rule.for) t.match(rule.for, /^[0-9]+[smh]$/, `${rule.alert} for`)
  }
  const gateway = await createService(gatewayService, await baseTestEnv(t))
  t.teardown(() => gateway.close())
  await gateway.app.inject({ url: '/health' })
  const exported = (await gateway.ops.inject({ url: '/metrics' })).body
  const names = new Set([...exported.matchAll(/^([a-z_:][a-z0-9_:]*)(?:\{| )/gm)].map((m) => m[1]!))
  const used = new Set(
    rules.flatMap((r) =>
      [
        ...r.expr
          .replace(/"[^"]*"/g, '')
          .replace(/\{[^}]*\}/g, ' ')
          .matchAll(/\b([a-z_][a-z0-9_]*)\b/g),
      ]
        .map((m) => m[1]!)
        .filter((w) => !promql.has(w) && /_/.test(w)),
    ),
  )
  t.ok(used.size >= 4, `metrics used: ${[...used].join(', ')}`)
  for (const metric of used) t.ok(names.has(metric), `${metric} is exported`)
})

// API keys in headers
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
serveEndpoint(keyService, natsChannels(env.NATS_NAMESPACE!).admin.keyVerify, pino({ level: 'silent' }), async ({ hash }) => {
  const key = known[hash]
  return { key: key ? { ...key, wallet: null } : null }
})

const keyed = await createService(gatewayService, { ...env, AGENT_URL: probeUrl, MARKET_DATA_URL: probeUrl })
t.teardown(() => keyed.close())
const send = (url: string, headers: Record<string, string>) =>
  keyed.app.inject({
    method: url.startsWith('/v1') ? 'POST' : 'GET',
    url,
    headers: { 'content-type': 'application/json', ...headers },
    payload: url.startsWith('/v1') ? '{}' : undefined,
  })

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
  t.same(none.json(), {
    type: 'error',
    error: { type: 'authentication_error', message: 'missing API key: send x-api-key: <key> or Authorization: Bearer <key>' },
  })
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
  t.match(
    chat.json(),
    { error: { code: 'invalid_api_key', message: 'missing API key: send Authorization: Bearer <key>' } },
    "the rest of /v1 stays OpenAI's",
  )
})
