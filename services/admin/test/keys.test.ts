import { fileURLToPath } from 'node:url'
import { hashApiKey, identityHeaders, apiKeyPattern, type NatsChannels } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import { baseTestEnv, compareSchemaWithDatabase, startService, testInternalToken } from '@ats/service-kit/testing'
import type { NatsConnection } from 'nats'
import pg from 'pg'
import t, { type Test } from 'tap'
import { adminService } from '../src/service.ts'

const bootstrapKey = 'atsk_bootstrap-key-for-tests-000000'

async function start(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), ADMIN_API_KEY: bootstrapKey, ...extra }
  const svc = await startService(t, adminService, env)
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${svc.url}${path}`, {
      method,
      headers: {
        [identityHeaders.internalToken]: testInternalToken,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  return { svc, env, call }
}

t.test('creating a key answers 201 with the raw key once, and stores only its SHA-256', async (t) => {
  const { call, env } = await start(t)
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
  t.same(list.body.keys.map((k: { label: string }) => k.label), ['bootstrap (ADMIN_API_KEY)', 'dashboard'])
  const text = JSON.stringify(list.body)
  t.notOk(text.includes(created.body.key), 'no raw key')
  t.notOk(text.includes(hashApiKey(created.body.key)), 'no hash')
  t.same(Object.keys(list.body.keys[1]).sort(), ['createdAt', 'id', 'label', 'prefix', 'tier'])
})

t.test('bad input answers 400 with {error} saying what is wrong', async (t) => {
  const { call } = await start(t)
  const cases: Array<[unknown, string]> = [
    [{ tier: 'readonly', label: 'x'.repeat(65) }, 'body/label must NOT have more than 64 characters'],
    [{ tier: 'superuser', label: 'x' }, 'body/tier must be equal to one of the allowed values: readonly, readwrite, admin'],
    [{ tier: 'readonly' }, 'body/label is required'],
    [{ label: 'x' }, 'body/tier is required'],
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

t.test('revoking is permanent: gone from the list, refused by verify, 404 the second time', async (t) => {
  const { call, svc } = await start(t)
  const created = await call('POST', '/admin/keys', { tier: 'readonly', label: 'temp' })
  const hash = hashApiKey(created.body.key)
  t.same(await callEndpoint(svc.ctx.nc, svc.ctx.channels.admin.keyVerify, { hash }), { key: { id: created.body.id, tier: 'readonly' } })

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
  const { call, svc } = await start(t)
  const created = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'watched' })
  const sub = svc.ctx.nc.subscribe(svc.ctx.channels.admin.keyRevoked.subject, { max: 1 })
  const received = (async () => {
    for await (const msg of sub) return svc.ctx.channels.admin.keyRevoked.message.decode(msg.data)
  })()
  await call('DELETE', `/admin/keys/${created.body.id}`)
  t.same(await received, { id: created.body.id, hash: hashApiKey(created.body.key) })
})

t.test('verify answers an unknown hash with null and a malformed request with a service error', async (t) => {
  const { svc } = await start(t)
  t.same(await callEndpoint(svc.ctx.nc, svc.ctx.channels.admin.keyVerify, { hash: 'a'.repeat(64) }), { key: null })
  await t.rejects(callEndpoint(svc.ctx.nc, { ...svc.ctx.channels.admin.keyVerify, request: { ...svc.ctx.channels.admin.keyVerify.request, encode: () => new TextEncoder().encode('{"hash":"nope"}') } }, { hash: '' }), {
    name: 'ServiceCallError',
    statusCode: 400,
    message: /invalid message: \/hash/,
  })
})

t.test('ADMIN_API_KEY is seeded as an admin key; changing it retires the old one', async (t) => {
  const env = { ...(await baseTestEnv(t)), ADMIN_API_KEY: bootstrapKey }
  const verify = (svc: { ctx: { nc: NatsConnection; channels: NatsChannels } }, raw: string) =>
    callEndpoint(svc.ctx.nc, svc.ctx.channels.admin.keyVerify, { hash: hashApiKey(raw) }).then((r) => r.key)

  const first = await startService(t, adminService, env)
  t.equal((await verify(first, bootstrapKey))?.tier, 'admin', 'seeded as admin')
  await first.close()

  const rotated = 'atsk_rotated-bootstrap-key-000000000'
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
  const { env } = await start(t)
  const schema = fileURLToPath(new URL('../prisma/schema.prisma', import.meta.url))
  t.same(await compareSchemaWithDatabase(schema, env.DATABASE_URL!, 'admin'), [])
})
