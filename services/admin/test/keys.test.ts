import { fileURLToPath } from 'node:url'
import { hashApiKey, identityHeaders, apiKeyPattern, type NatsChannels } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import { baseTestEnv, compareSchemaWithDatabase, startService, testInternalToken } from '@ats/service-kit/testing'
import type { NatsConnection } from 'nats'
import pg from 'pg'
import t, { type Test } from 'tap'
import { adminService } from '../src/service.ts'
import { internalCall } from './helpers.ts'

const bootstrapKey = 'atsk_bootstrap-key-for-tests-00000000'

async function start(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), ADMIN_API_KEY: bootstrapKey, ...extra }
  const svc = await startService(t, adminService, env)
  const call = internalCall(svc.url)
  return { svc, env, call }
}

let shared: ReturnType<typeof start> | undefined

/**
 * One admin for the tests that look only at keys they make themselves (starting one takes about
 * half a second): started by the first of them, stopped when the file ends. A test that reads
 * the whole key list, or restarts admin, starts its own.
 */
const sharedAdmin = () => (shared ??= start(t))

t.test('creating a key answers 201 with the raw key once, and stores only its SHA-256', async (t) => {
  const { call, env } = await sharedAdmin()
  const created = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'trading bot' })
  t.equal(created.status, 201)
  t.match(created.body, { id: /^key_/, tier: 'readwrite', label: 'trading bot', createdAt: Number })
  t.match(created.body.key, apiKeyPattern)
  t.equal(created.body.prefix, created.body.key.slice(0, 12))

  const db = new pg.Client({ connectionString: env.DATABASE_URL })
  await db.connect()
  t.teardown(() => db.end())
  const { rows } = await db.query('SELECT * FROM admin.api_keys WHERE id = $1', [created.body.id])
  t.equal(rows[0].hash, hashApiKey(created.body.key))
  t.notOk(JSON.stringify(rows).includes(created.body.key), 'the raw key is nowhere in the row')
})

t.test('the list shows entries without raw keys or hashes', async (t) => {
  const { call } = await start(t)
  const created = await call('POST', '/admin/keys', { tier: 'readonly', label: 'dashboard' })
  const list = await call('GET', '/admin/keys')
  t.equal(list.status, 200)
  t.same(
    list.body.keys.map((k: { label: string }) => k.label),
    ['bootstrap (ADMIN_API_KEY)', 'dashboard'],
  )
  const text = JSON.stringify(list.body)
  t.notOk(text.includes(created.body.key), 'no raw key')
  t.notOk(text.includes(hashApiKey(created.body.key)), 'no hash')
  t.same(Object.keys(list.body.keys[1]).sort(), ['createdAt', 'id', 'label', 'policy', 'prefix', 'tier', 'wallet'])
  t.equal(list.body.keys[1].policy, null, 'no spend policy unless given')
})

t.test('bad input answers 400 with {error} saying what is wrong', async (t) => {
  const { call } = await sharedAdmin()
  const cases: Array<[unknown, string]> = [
    [{ tier: 'readonly', label: 'x'.repeat(65) }, 'body/label must NOT have more than 64 characters'],
    [{ tier: 'superuser', label: 'x' }, 'body/tier must be equal to one of the allowed values: readonly, readwrite, admin'],
    [{ tier: 'readonly' }, 'Missing required params: label (body)'],
    [{ label: 'x' }, 'Missing required params: tier (body)'],
    [{ tier: 'readonly', label: '' }, 'body/label must NOT have fewer than 1 characters'],
  ]
  for (const [body, error] of cases) {
    const res = await call('POST', '/admin/keys', body)
    t.equal(res.status, 400, JSON.stringify(body))
    t.same(res.body, { error }, JSON.stringify(body))
  }
  const ok = await call('POST', '/admin/keys', { tier: 'admin', label: 'x'.repeat(64) })
  t.equal(ok.status, 201, 'a 64-character label is fine')
})

const policy = { maxUsdPerSwap: 250.5, maxUsdPerDay: 1000, allowedTokens: ['USDC', '0xaf88d065e77c8cC2239327C5EDb3A432268e5831'] }

t.test('a key created with a spend policy shows it in the answer and the list', async (t) => {
  const { call } = await sharedAdmin()
  const created = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'capped bot', policy })
  t.equal(created.status, 201)
  t.same(created.body.policy, policy)
  const listed = (await call('GET', '/admin/keys')).body.keys.find((k: { id: string }) => k.id === created.body.id)
  t.same(listed.policy, policy)
  const admin = await call('POST', '/admin/keys', { tier: 'admin', label: 'capped admin', policy: { maxUsdPerDay: 5 } })
  t.same(admin.body.policy, { maxUsdPerDay: 5 }, 'admin keys may have one too')
})

t.test('a readonly key with a spend policy answers 400: it cannot swap', async (t) => {
  const { call } = await start(t)
  const res = await call('POST', '/admin/keys', { tier: 'readonly', label: 'dashboard', policy: { maxUsdPerSwap: 10 } })
  t.equal(res.status, 400)
  t.same(res.body, { error: 'a readonly key cannot swap; spend policies apply to readwrite and admin keys' })
  t.same(
    (await call('GET', '/admin/keys')).body.keys.map((k: { label: string }) => k.label),
    ['bootstrap (ADMIN_API_KEY)'],
    'nothing created',
  )
})

t.test('a bad spend policy answers 400 saying what is wrong', async (t) => {
  const { call } = await sharedAdmin()
  const cases: Array<[unknown, string]> = [
    [{ maxUsdPerSwap: -5 }, 'body/policy/maxUsdPerSwap must be > 0'],
    [{ maxUsdPerDay: 0 }, 'body/policy/maxUsdPerDay must be > 0'],
    [{ maxUsdPerDay: 2e9 }, 'body/policy/maxUsdPerDay must be <= 1000000000'],
    [{}, 'body/policy must NOT have fewer than 1 properties'],
    [{ maxUsdPerSwap: 10, maxUsdPerWeek: 10 }, 'body/policy must NOT have additional properties'],
    [{ allowedTokens: [] }, 'body/policy/allowedTokens must NOT have fewer than 1 items'],
    [{ allowedTokens: ['USDC', ''] }, 'body/policy/allowedTokens/1 must NOT have fewer than 1 characters'],
  ]
  for (const [bad, error] of cases) {
    const res = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'bot', policy: bad })
    t.equal(res.status, 400, JSON.stringify(bad))
    t.same(res.body, { error }, JSON.stringify(bad))
  }
})

t.test('PUT /admin/keys/:id/policy sets and clears the spend policy', async (t) => {
  const { call } = await sharedAdmin()
  const created = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'bot' })
  const set = await call('PUT', `/admin/keys/${created.body.id}/policy`, { policy })
  t.equal(set.status, 200)
  t.same(set.body, {
    id: created.body.id,
    tier: 'readwrite',
    label: 'bot',
    prefix: created.body.prefix,
    createdAt: created.body.createdAt,
    policy,
    wallet: null,
  })
  const changed = await call('PUT', `/admin/keys/${created.body.id}/policy`, { policy: { maxUsdPerSwap: 1 } })
  t.same(changed.body.policy, { maxUsdPerSwap: 1 }, 'a new policy replaces the old one whole')
  const cleared = await call('PUT', `/admin/keys/${created.body.id}/policy`, { policy: null })
  t.equal(cleared.status, 200)
  t.equal(cleared.body.policy, null)
  t.equal((await call('GET', '/admin/keys')).body.keys.find((k: { id: string }) => k.id === created.body.id).policy, null)
})

t.test('PUT of a policy answers 404 for an unknown or revoked key and 400 for a readonly key or a bad policy', async (t) => {
  const { call } = await sharedAdmin()
  const unknown = await call('PUT', '/admin/keys/key_unknown/policy', { policy })
  t.equal(unknown.status, 404)
  t.same(unknown.body, { error: 'active key key_unknown not found' })

  const revoked = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'gone' })
  await call('DELETE', `/admin/keys/${revoked.body.id}`)
  t.equal((await call('PUT', `/admin/keys/${revoked.body.id}/policy`, { policy })).status, 404)

  const readonly = await call('POST', '/admin/keys', { tier: 'readonly', label: 'dashboard' })
  const refused = await call('PUT', `/admin/keys/${readonly.body.id}/policy`, { policy })
  t.equal(refused.status, 400)
  t.same(refused.body, { error: 'a readonly key cannot swap; spend policies apply to readwrite and admin keys' })

  const bot = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'bot' })
  t.equal((await call('PUT', `/admin/keys/${bot.body.id}/policy`, { policy: {} })).status, 400, 'an empty policy')
  t.equal((await call('PUT', `/admin/keys/${bot.body.id}/policy`, {})).status, 400, 'no policy field')
})

t.test('the keys.policy endpoint answers an active key with its policy and wallet, null for a revoked or unknown one', async (t) => {
  const { call, svc } = await sharedAdmin()
  const { keyPolicy } = svc.ctx.channels.admin
  const wallet = '0x000000000000000000000000000000000000dEaD'
  const capped = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'capped', policy, wallet: wallet.toLowerCase() })
  const free = await call('POST', '/admin/keys', { tier: 'admin', label: 'free' })
  t.same(await callEndpoint(svc.ctx.nc, keyPolicy, { keyId: capped.body.id }), {
    key: { id: capped.body.id, tier: 'readwrite', policy, wallet },
  })
  t.same(await callEndpoint(svc.ctx.nc, keyPolicy, { keyId: free.body.id }), {
    key: { id: free.body.id, tier: 'admin', policy: null, wallet: null },
  })

  const recipients = { maxUsdPerDay: 20, allowedRecipients: ['0x1111111111111111111111111111111111111111'] }
  t.equal((await call('PUT', `/admin/keys/${free.body.id}/policy`, { policy: recipients })).status, 200)
  t.same(
    await callEndpoint(svc.ctx.nc, keyPolicy, { keyId: free.body.id }),
    { key: { id: free.body.id, tier: 'admin', policy: recipients, wallet: null } },
    'a change applies at once',
  )
  const bad = await call('PUT', `/admin/keys/${free.body.id}/policy`, { policy: { allowedRecipients: ['0x123'] } })
  t.equal(bad.status, 400, 'a recipient that is not an address')
  t.match(bad.body.error, /body\/policy\/allowedRecipients\/0 must match pattern/)

  await call('DELETE', `/admin/keys/${capped.body.id}`)
  t.same(await callEndpoint(svc.ctx.nc, keyPolicy, { keyId: capped.body.id }), { key: null }, 'revoked')
  t.same(await callEndpoint(svc.ctx.nc, keyPolicy, { keyId: 'key_unknown' }), { key: null }, 'unknown')
})

t.test('revoking is permanent: gone from the list, refused by verify, 404 the second time', async (t) => {
  const { call, svc } = await sharedAdmin()
  const created = await call('POST', '/admin/keys', { tier: 'readonly', label: 'temp' })
  const hash = hashApiKey(created.body.key)
  t.same(await callEndpoint(svc.ctx.nc, svc.ctx.channels.admin.keyVerify, { hash }), {
    key: { id: created.body.id, tier: 'readonly', wallet: null },
  })

  const revoked = await call('DELETE', `/admin/keys/${created.body.id}`)
  t.equal(revoked.status, 200)
  t.match(revoked.body, { ok: true, id: created.body.id, revokedAt: Number })
  t.notOk(
    (await call('GET', '/admin/keys')).body.keys.some((k: { id: string }) => k.id === created.body.id),
    'not listed any more',
  )
  t.same(await callEndpoint(svc.ctx.nc, svc.ctx.channels.admin.keyVerify, { hash }), { key: null })
  const again = await call('DELETE', `/admin/keys/${created.body.id}`)
  t.equal(again.status, 404)
  t.same(again.body, { error: `active key ${created.body.id} not found` })
  t.equal((await call('DELETE', '/admin/keys/key_unknown')).status, 404)
})

t.test('a revocation is broadcast with the key id and hash', async (t) => {
  const { call, svc } = await sharedAdmin()
  const created = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'watched' })
  const sub = svc.ctx.nc.subscribe(svc.ctx.channels.admin.keyRevoked.subject, { max: 1 })
  const received = (async () => {
    for await (const msg of sub) return svc.ctx.channels.admin.keyRevoked.message.decode(msg.data)
  })()
  await call('DELETE', `/admin/keys/${created.body.id}`)
  t.same(await received, { id: created.body.id, hash: hashApiKey(created.body.key) })
})

t.test('verify answers an unknown hash with null and a malformed request with a service error', async (t) => {
  const { svc } = await sharedAdmin()
  t.same(await callEndpoint(svc.ctx.nc, svc.ctx.channels.admin.keyVerify, { hash: 'a'.repeat(64) }), { key: null })
  await t.rejects(
    callEndpoint(
      svc.ctx.nc,
      {
        ...svc.ctx.channels.admin.keyVerify,
        request: { ...svc.ctx.channels.admin.keyVerify.request, encode: () => new TextEncoder().encode('{"hash":"nope"}') },
      },
      { hash: '' },
    ),
    {
      name: 'ServiceCallError',
      statusCode: 400,
      message: /invalid message: \/hash/,
    },
  )
})

t.test('ADMIN_API_KEY is seeded as an admin key; changing it retires the old one', async (t) => {
  const env = { ...(await baseTestEnv(t)), ADMIN_API_KEY: bootstrapKey }
  const verify = (svc: { ctx: { nc: NatsConnection; channels: NatsChannels } }, raw: string) =>
    callEndpoint(svc.ctx.nc, svc.ctx.channels.admin.keyVerify, { hash: hashApiKey(raw) }).then((r) => r.key)

  const first = await startService(t, adminService, env)
  t.equal((await verify(first, bootstrapKey))?.tier, 'admin', 'seeded as admin')
  await first.close()

  const rotated = 'atsk_rotated-bootstrap-key-0000000000'
  const second = await startService(t, adminService, { ...env, ADMIN_API_KEY: rotated })
  const current = await verify(second, rotated)
  t.equal(current?.tier, 'admin', 'the new one works')
  t.equal(await verify(second, bootstrapKey), null, 'the old one is revoked')
  await second.close()

  const third = await startService(t, adminService, { ...env, ADMIN_API_KEY: rotated })
  t.equal((await verify(third, rotated))?.id, current?.id, 'a restart keeps the same key')
})

t.test('a bootstrap key an admin revoked stays revoked after a restart', async (t) => {
  const env = { ...(await baseTestEnv(t)), ADMIN_API_KEY: bootstrapKey }
  const first = await startService(t, adminService, env)
  const { key } = await callEndpoint(first.ctx.nc, first.ctx.channels.admin.keyVerify, { hash: hashApiKey(bootstrapKey) })
  const res = await fetch(`${first.url}/admin/keys/${key?.id}`, {
    method: 'DELETE',
    headers: { [identityHeaders.internalToken]: testInternalToken },
  })
  t.equal(res.status, 200)
  await first.close()
  const second = await startService(t, adminService, env)
  t.same(await callEndpoint(second.ctx.nc, second.ctx.channels.admin.keyVerify, { hash: hashApiKey(bootstrapKey) }), { key: null })
})

t.test('schema.prisma and the migrated database agree', async (t) => {
  const { env } = await sharedAdmin()
  const schema = fileURLToPath(new URL('../prisma/schema.prisma', import.meta.url))
  t.same(await compareSchemaWithDatabase(schema, env.DATABASE_URL!, 'admin'), [])
})
