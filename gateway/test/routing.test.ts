import { adminRoutes, anthropicErrorBody, openAiErrorBody, publicRoutes } from '@ats/contracts'
import t from 'tap'
import { buildOpenApi } from '../src/routing/openapi.ts'
import { groupFor, routeTable } from '../src/routing/routeTable.ts'

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
  t.same((doc.paths['/health']?.get as { security: unknown } | undefined)?.security, [])
  t.ok(adminRoutes.createKey.schema.response[201])
  const skills = doc.paths['/agent/skills']?.get as { security: unknown; responses: Record<string, unknown> }
  t.same(skills.security, [{ x402: [] }], 'agent routes are paid')
  t.same(Object.keys(skills.responses).sort(), ['200', '402', '503'])
  const chat = doc.paths['/v1/chat/completions']?.post as { security: unknown; responses: Record<string, { content: Record<string, { schema: { $id?: string; properties?: Record<string, unknown> } }> }> }
  t.same(chat.security, [{ apiKey: ['readwrite'] }], '/v1 needs a readwrite key')
  t.same(Object.keys(chat.responses['200']!.content).sort(), ['application/json', 'text/event-stream'], 'a completion, or its chunks streamed')
  t.equal(chat.responses['400']!.content['application/json']!.schema.$id, 'OpenAiError', "/v1 errors are OpenAI's shape")
  t.ok(doc.paths['/v1/models']?.get, 'the models')
})

t.test("/v1/messages is a group of its own: Anthropic's errors, and its key also read from x-api-key", async (t) => {
  const messages = groupFor('/v1/messages')
  t.equal(messages?.errors, anthropicErrorBody)
  t.same(messages?.auth, { kind: 'key', tier: 'readwrite', keyHeaders: ['authorization', 'x-api-key'] })
  t.equal(groupFor('/v1/chat/completions')?.errors, openAiErrorBody, "the rest of /v1 is OpenAI's")
  t.same(groupFor('/v1/chat/completions')?.auth, { kind: 'key', tier: 'readwrite' }, 'and reads Authorization only')
  t.equal(groupFor('/v1/messagesx')?.prefix, '/v1')
  const doc = buildOpenApi({ title: 't', version: '1' }, publicRoutes)
  const create = doc.paths['/v1/messages']?.post as { security: unknown; responses: Record<string, { content: Record<string, { schema: { $id?: string } }> }> }
  t.same(create.security, [{ apiKey: ['readwrite'] }, { xApiKey: ['readwrite'] }], 'either header')
  t.same(Object.keys(create.responses['200']!.content).sort(), ['application/json', 'text/event-stream'])
  t.equal(create.responses['400']!.content['application/json']!.schema.$id, 'AnthropicError')
})
