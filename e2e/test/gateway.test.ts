import { readFileSync } from 'node:fs'
import { publicRoutes } from '@ats/contracts'
import t from 'tap'
import { adminKey, startFleet } from './fleet.ts'
// in this process too (a process spends ~2.5 s of CPU loading the fleet's modules): bad input, rate
// limits, slow clients, webhook revocation, the dashboard; each with a fleet of its own, runnable alone
import './gateway/badInput.ts'
import './gateway/rateLimit.ts'
import './gateway/slowClients.ts'
import './gateway/webhookRevocation.ts'
import './gateway/dashboard.ts'

/**
 * One fleet (two gateways) for the tests that need nothing of their own: each makes its own
 * keys, so they do not see each other. Its failed authentications add up across the tests, so
 * the per-address limit is out of the way. Stopping admin and leaving services out get a fleet
 * of their own below.
 */
t.test("the gateway's own routes on one shared fleet", async (t) => {
  const shared = await startFleet(t, { gateways: 2, gatewayEnv: { AUTH_FAILURE_LIMIT: '1000' } })

  t.test('GET /health answers ok and a timestamp without a key', async (t) => {
    const { request } = shared
    const res = await request('/health')
    t.equal(res.status, 200)
    t.match(res.body, { ok: true, ts: Number })
  })

  t.test('GET / names the service, version, chain and where the docs are', async (t) => {
    const { request } = shared
    const res = await request('/')
    t.same(res.body, {
      name: 'agent-trading-service',
      // the release every package.json names (pnpm release sets them all)
      version: JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version,
      chain: 'arbitrum-one',
      chainId: 42161,
      docs: '/docs',
      openapi: '/openapi.json',
    })
    const docs = await request(res.body.openapi)
    t.equal(docs.status, 200)
    t.equal(docs.body.openapi, '3.1.0')
    for (const r of publicRoutes) t.ok(docs.body.paths[r.url.replace(/:(\w+)/g, '{$1}')]?.[r.method.toLowerCase()], `${r.method} ${r.url}`)
  })

  t.test('the raw key appears only in the create answer', async (t) => {
    const { request, createKey } = shared
    const created = await createKey('readonly')
    const list = await request('/admin/keys', { key: adminKey })
    t.equal(list.status, 200)
    t.ok(list.body.keys.some((k: { id: string }) => k.id === created.id))
    t.notOk(JSON.stringify(list.body).includes(created.key))
  })

  t.test("a service's 400 reaches the client through the gateway as {error}", async (t) => {
    const { request } = shared
    const long = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readonly', label: 'x'.repeat(65) } })
    t.equal(long.status, 400)
    t.same(long.body, { error: 'body/label must NOT have more than 64 characters' })
    const tier = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'root', label: 'x' } })
    t.equal(tier.status, 400)
    t.same(tier.body, { error: 'body/tier must be equal to one of the allowed values: readonly, readwrite, admin' })
    const notJson = await request('/admin/keys', {
      method: 'POST',
      key: adminKey,
      headers: { 'content-type': 'application/json' },
      body: undefined,
    })
    t.equal(notJson.status, 400)
    t.match(notJson.body, { error: String })
    const unknown = await request('/admin/keys/key_nope', { method: 'DELETE', key: adminKey })
    t.equal(unknown.status, 404)
    t.same(unknown.body, { error: 'active key key_nope not found' })
  })

  t.test('each tier reaches exactly the route groups the spec allows', async (t) => {
    const { request, createKey } = shared
    const keys = {
      readonly: (await createKey('readonly')).key,
      readwrite: (await createKey('readwrite')).key,
      admin: adminKey,
    }
    const groups: Array<[string, keyof typeof keys]> = [
      ['/portfolio/jobs', 'readonly'],
      ['/portfolio/positions', 'readonly'],
      ['/market/prices', 'readonly'],
      ['/nfts/0xabc', 'readonly'],
      ['/predictions/top', 'readonly'],
      ['/bridge/chains', 'readonly'],
      ['/swap/quote', 'readwrite'],
      ['/launchpad/tokens', 'readwrite'],
      ['/v1/chat/completions', 'readwrite'],
      ['/automations', 'readwrite'],
      ['/approvals', 'readwrite'],
      ['/webhooks', 'readwrite'],
      ['/admin/keys', 'admin'],
    ]
    const rank = { readonly: 0, readwrite: 1, admin: 2 }
    // /v1 answers OpenAI's error shape: the same message, in error.message
    const messageOf = (path: string, body: any) => (path.startsWith('/v1/') ? body.error.message : body.error)
    for (const [path, need] of groups) {
      const none = await request(path)
      t.equal(none.status, 401, `${path} without a key`)
      t.equal(messageOf(path, none.body), 'missing API key: send Authorization: Bearer <key>')
      const bad = await request(path, { key: 'atsk_this-key-does-not-exist-00000000' })
      t.equal(bad.status, 401, `${path} with an unknown key`)
      t.equal(messageOf(path, bad.body), 'invalid or revoked API key')
      for (const tier of ['readonly', 'readwrite', 'admin'] as const) {
        const res = await request(path, { key: keys[tier] })
        if (rank[tier] >= rank[need]) t.equal(res.status, 200, `${path} with a ${tier} key passes`)
        else {
          t.equal(res.status, 403, `${path} with a ${tier} key is refused`)
          t.equal(messageOf(path, res.body), `this route needs an API key of tier ${need} or higher; this key is ${tier}`)
        }
      }
    }
  })

  t.test('a malformed Authorization header answers 401 saying so', async (t) => {
    const { request } = shared
    const res = await request('/market/prices', { headers: { authorization: 'Basic dXNlcjpwYXNz' } })
    t.equal(res.status, 401)
    t.same(res.body, { error: 'malformed Authorization header: expected Bearer <key>' })
  })

  t.test("the gateway sets identity headers and strips the client's", async (t) => {
    const { request, createKey } = shared
    const { id, key } = await createKey('readwrite')
    const res = await request('/swap/quote?tokenIn=WETH', {
      key,
      headers: {
        'x-ats-owner-id': 'someone-else',
        'x-ats-key-tier': 'admin',
        'x-ats-internal-token': 'forged',
        'x-payment': 'abc',
        'x-ats-key-wallet': '0x0000000000000000000000000000000000000001',
      },
    })
    t.equal(res.status, 200)
    const headers = res.body.headers as Record<string, string>
    t.notOk('x-ats-key-wallet' in headers, "a client's wallet claim is stripped; this key has none")
    t.equal(res.body.path, '/swap/quote?tokenIn=WETH', 'path and query forwarded as sent')
    t.equal(headers['x-ats-owner-id'], id)
    t.equal(headers['x-ats-key-id'], id)
    t.equal(headers['x-ats-key-tier'], 'readwrite')
    t.equal(headers['x-ats-internal-token'], 'test-internal-token-0123456789')
    t.match(headers['x-request-id'], /^[0-9a-f-]{36}$/)
    t.equal(res.headers.get('x-request-id'), headers['x-request-id'], 'the client gets the request id the service saw')
    t.notOk('authorization' in headers, 'the raw key does not travel on')
    t.notOk('x-payment' in headers)
  })

  t.test('a key bound to a wallet carries it to the services as x-ats-key-wallet', async (t) => {
    const { request } = shared
    const wallet = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'
    const created = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readonly', label: 'bound', wallet } })
    t.equal(created.status, 201)
    const res = await request('/market/prices', {
      key: created.body.key,
      headers: { 'x-ats-key-wallet': '0x0000000000000000000000000000000000000001' },
    })
    t.equal(res.body.headers['x-ats-key-wallet'], wallet)
  })

  t.test('a revoked key is refused at once by every running gateway', async (t) => {
    const { request, createKey } = shared
    const { id, key } = await createKey('readonly')
    t.equal((await request('/market/prices', { key, via: 0 })).status, 200, 'cached on gateway 1')
    t.equal((await request('/market/prices', { key, via: 1 })).status, 200, 'cached on gateway 2')
    const revoked = await request(`/admin/keys/${id}`, { method: 'DELETE', key: adminKey })
    t.equal(revoked.status, 200)
    const deadline = Date.now() + 1000
    const refused = [false, false]
    while (Date.now() < deadline && !refused.every(Boolean)) {
      for (const via of [0, 1]) refused[via] ||= (await request('/market/prices', { key, via })).status === 401
    }
    t.same(refused, [true, true], 'both gateways refuse it within one second')
    t.same((await request('/market/prices', { key })).body, { error: 'invalid or revoked API key' })
  })

  t.test('routes of services that are not running answer 503 {error}', async (t) => {
    const { request, createKey } = await startFleet(t, { otherServices: 'http://127.0.0.1:9' })
    const { key } = await createKey('readwrite')
    const routes: Array<[string, string]> = [
      ['/market/prices', 'market-data'],
      ['/swap/quote', 'trading'],
      ['/automations', 'automation'],
      ['/portfolio/jobs', 'agent'],
    ]
    for (const [path, service] of routes) {
      const res = await request(path, { key })
      t.equal(res.status, 503, path)
      t.same(res.body, { error: `${service} service unavailable` })
    }
    // /v1 speaks OpenAI's error shape, the gateway's own errors included
    const chat = await request('/v1/models', { key })
    t.equal(chat.status, 503)
    t.same(chat.body, { error: { message: 'agent service unavailable', type: 'server_error', param: null, code: 'unavailable' } })
    const agent = await request('/agent/skills')
    t.equal(agent.status, 503)
    t.same(agent.body, { error: 'payments are not configured on this gateway (PAY_TO is not set)' })
  })

  t.test('an unknown path answers 404 {error}', async (t) => {
    const { request } = shared
    const res = await request('/nowhere')
    t.equal(res.status, 404)
    t.match(res.headers.get('x-request-id'), /^[0-9a-f-]{36}$/, 'errors carry the request id too')
    t.same(res.body, { error: 'no route GET /nowhere' })
  })

  t.test('when key verification is unreachable a new key gets 503, not a false 401', async (t) => {
    // no key cache: the gateway must ask admin (a key it heard created would pass from its cache)
    const { request, createKey, admin } = await startFleet(t, { gatewayEnv: { KEY_CACHE_TTL_MS: '0' } })
    const { key } = await createKey('readonly')
    await admin.close()
    const res = await request('/market/prices', { key })
    t.equal(res.status, 503)
    t.same(res.body, { error: 'API key verification is unavailable, try again shortly' })
  })
})
