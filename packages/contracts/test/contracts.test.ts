import t from 'tap'
import {
  adminRoutes,
  apiKeyPattern,
  buildOpenApi,
  codec,
  generateApiKey,
  groupFor,
  hashApiKey,
  KeyVerifyReply,
  MessageError,
  publicRoutes,
  routeTable,
  tierAllows,
  visiblePrefix,
} from '../src/index.ts'

t.test('a higher tier may use the routes of lower tiers, never the reverse', async (t) => {
  t.ok(tierAllows('admin', 'readonly'))
  t.ok(tierAllows('readwrite', 'readwrite'))
  t.notOk(tierAllows('readonly', 'readwrite'))
  t.notOk(tierAllows('readwrite', 'admin'))
})

t.test('api keys carry a scannable prefix, 192 random bits, and hash to SHA-256 hex', async (t) => {
  const a = generateApiKey()
  const b = generateApiKey()
  t.match(a, apiKeyPattern)
  t.not(a, b)
  t.match(hashApiKey(a), /^[0-9a-f]{64}$/)
  t.equal(hashApiKey(a), hashApiKey(a))
  t.equal(visiblePrefix(a).length, 12)
  t.ok(a.startsWith(visiblePrefix(a)))
})

t.test('a codec refuses messages that do not match the schema, both ways', async (t) => {
  const c = codec(KeyVerifyReply)
  const bytes = c.encode({ key: { id: 'key_1', tier: 'admin' } })
  t.same(c.decode(bytes), { key: { id: 'key_1', tier: 'admin' } })
  t.throws(() => c.decode(new TextEncoder().encode('{"key":{"id":"x","tier":"root"}}')), MessageError)
  t.throws(() => c.decode(new TextEncoder().encode('not json')), /not JSON/)
  t.throws(() => c.encode({ key: { id: 1 } } as never), MessageError)
})

t.test('the longest route-table prefix wins', async (t) => {
  t.equal(groupFor('/portfolio/jobs')?.service, 'agent')
  t.equal(groupFor('/portfolio/positions')?.service, 'trading')
  t.equal(groupFor('/admin/keys/key_1')?.auth.kind, 'key')
  t.equal(groupFor('/agentx'), undefined)
  t.equal(groupFor('/nowhere'), undefined)
  t.equal(new Set(routeTable.map((g) => g.prefix)).size, routeTable.length, 'no prefix twice')
})

t.test('the OpenAPI document lists every public route with its auth', async (t) => {
  const doc = buildOpenApi({ title: 't', version: '1' }, publicRoutes)
  for (const r of publicRoutes) {
    const path = r.url.replace(/:(\w+)/g, '{$1}')
    t.ok(doc.paths[path]?.[r.method.toLowerCase()], `${r.method} ${r.url} documented`)
  }
  const create = doc.paths['/admin/keys']?.post as { security: unknown; requestBody: { content: Record<string, { schema: { required: string[] } }> } }
  t.same(create.security, [{ apiKey: ['admin'] }])
  t.same(create.requestBody.content['application/json']?.schema.required.sort(), ['label', 'tier'])
  const revoke = doc.paths['/admin/keys/{id}']?.delete as { parameters: Array<{ name: string; in: string }> }
  t.same(revoke.parameters.map((p) => [p.name, p.in]), [['id', 'path']])
  t.same((doc.paths['/health']?.get as { security: unknown }).security, [])
  t.ok(adminRoutes.createKey.schema.response[201])
  const skills = doc.paths['/agent/skills']?.get as { security: unknown; responses: Record<string, unknown> }
  t.same(skills.security, [{ x402: [] }], 'agent routes are paid')
  t.same(Object.keys(skills.responses).sort(), ['200', '402', '503'])
})
