import { FreeText, identityHeaders } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import t from 'tap'
import { Type } from 'typebox'
import type { ServiceDefinition } from '../src/service.ts'
import { startService, testInfra, testInternalToken } from '../src/testing.ts'

/** A route with every kind of field the kit's rules cover: an id in the path, query values, a label, free text, numbers, a free-form record. */
const itemSchema = {
  params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }),
  querystring: Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1 })), q: Type.Optional(Type.String()) }, { additionalProperties: false }),
  body: Type.Object(
    {
      label: Type.String({ maxLength: 64 }),
      prompt: Type.Optional(FreeText()),
      amount: Type.Optional(Type.Number()),
      config: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    },
    { additionalProperties: false },
  ),
}

const probe: ServiceDefinition<{}, never> = {
  name: 'probe',
  version: '1.0.0',
  port: 0,
  async register(app) {
    const api = app.withTypeProvider<TypeBoxTypeProvider>()
    api.post('/items/:id', { schema: itemSchema }, async (request) => ({ id: request.params.id, query: request.query, body: request.body }))
  },
}

const { natsUrl } = await testInfra()
const svc = await startService(t, probe, { NATS_URL: natsUrl, INTERNAL_TOKEN: testInternalToken, LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0' })

/** POST /items/:id with a raw path, query and JSON text: the status and the answer. */
async function post(path: string, body: string) {
  const res = await fetch(`${svc.url}/items/${path}`, {
    method: 'POST',
    headers: { [identityHeaders.internalToken]: testInternalToken, 'content-type': 'application/json' },
    body,
  })
  return { status: res.status, body: (await res.json()) as any }
}

t.test('a request within the rules passes, tabs and line breaks in free text included', async (t) => {
  const res = await post('item-1?limit=10&q=swap', JSON.stringify({ label: 'main', prompt: 'buy\tETH\r\nthen sell', amount: 1.5, config: { note: ['x'] } }))
  t.equal(res.status, 200, JSON.stringify(res.body))
  t.same(res.body.query, { limit: 10, q: 'swap' })
  t.equal(res.body.body.prompt, 'buy\tETH\r\nthen sell')
})

t.test('a control character in a path parameter, a query value or a label answers 400 naming the field', async (t) => {
  const label = (value: string) => JSON.stringify({ label: value })
  const cases: Array<[string, string, string]> = [
    ['a%00b', label('x'), 'params/id must not contain control characters (found U+0000)'],
    ['x?q=a%00b', label('x'), 'querystring/q must not contain control characters (found U+0000)'],
    ['x?q=line%0Abreak', label('x'), 'querystring/q must not contain control characters (found U+000A)'],
    ['x', label('two\nlines'), 'body/label must not contain control characters (found U+000A)'],
    ['x', label('bell\u0007'), 'body/label must not contain control characters (found U+0007)'],
    ['x', label('del\u007f'), 'body/label must not contain control characters (found U+007F)'],
  ]
  for (const [path, body, error] of cases) {
    const res = await post(path, body)
    t.equal(res.status, 400, `${path} ${body}`)
    t.same(res.body, { error }, `${path} ${body}`)
  }
})

t.test('free text refuses NUL and the other control characters, but not tab, CR and LF', async (t) => {
  for (const [bad, code] of [['\u0000', 'U+0000'], ['\u001b', 'U+001B']]) {
    const res = await post('x', JSON.stringify({ label: 'x', prompt: `a${bad}b` }))
    t.equal(res.status, 400)
    t.same(res.body, { error: `body/prompt must not contain control characters other than tab, line feed and carriage return (found ${code})` })
  }
})

t.test('a NUL anywhere inside a free-form record answers 400 naming where', async (t) => {
  const value = await post('x', JSON.stringify({ label: 'x', config: { note: ['ok', 'a\u0000b'] } }))
  t.equal(value.status, 400)
  t.same(value.body, { error: 'body/config/note/1 must not contain NUL characters (U+0000)' })
  const key = await post('x', JSON.stringify({ label: 'x', config: { 'a\u0000b': 1 } }))
  t.equal(key.status, 400)
  t.same(key.body, { error: 'body/config/a\\u0000b must not have NUL characters (U+0000) in its name' })
})

t.test('1e309, NaN and integers beyond the safe range answer 400 naming the parameter', async (t) => {
  const label = JSON.stringify({ label: 'x' })
  const unsafe = 'querystring/limit must be an integer between -9007199254740991 and 9007199254740991'
  const cases: Array<[string, string, string]> = [
    ['x?limit=1e309', label, unsafe],
    ['x?limit=9007199254740993', label, unsafe],
    ['x?limit=NaN', label, 'querystring/limit must be integer'],
    // JSON.parse reads 1e309 as Infinity, which Ajv's number type refuses
    ['x', '{"label":"x","amount":1e309}', 'body/amount must be number'],
    ['x', '{"label":"x","amount":-1e309}', 'body/amount must be number'],
    ['x', '{"label":"x","config":{"deep":[1e309]}}', 'body/config/deep/0 must be a finite number'],
  ]
  for (const [path, body, error] of cases) {
    const res = await post(path, body)
    t.equal(res.status, 400, `${path} ${body}`)
    t.same(res.body, { error }, `${path} ${body}`)
  }
})

t.test("the route's own schema objects are left as they were (contracts are shared)", async (t) => {
  t.notOk('controlCharacters' in itemSchema.params.properties.id)
  t.notOk('safeContent' in itemSchema.body)
  t.notOk('safeNumber' in (itemSchema.querystring.properties.limit as object))
})
