import { request as httpRequest } from 'node:http'
import t from 'tap'
import { adminKey, startAgentFleet } from '../fleet.ts'

/**
 * Bad input to every keyed route the OpenAPI document lists, generated from the document itself
 * so new routes are covered: a NUL character in each string parameter and body field, `1e309` and
 * `NaN` in each number, and a 2 MB body (with and without `Expect: 100-continue`). Every answer
 * must be a 4xx with an error message (413 for the body), never a 5xx.
 */
t.test('bad input to every keyed route answers 400', async (t) => {
  const fleet = await startAgentFleet(t, { automationEnv: { AUTOMATION_SCHEDULER: 'false' } })
  const { gateway, createKey } = fleet
  const keys: Record<string, string> = {
    readonly: (await createKey('readonly', 'bad input')).key,
    readwrite: (await createKey('readwrite', 'bad input')).key,
    admin: adminKey,
  }

  type Schema = Record<string, any>
  interface Parameter {
    name: string
    in: 'path' | 'query' | 'header'
    required: boolean
    schema: Schema
  }
  interface Operation {
    method: string
    path: string
    tier: string
    parameters: Parameter[]
    body?: Schema
  }
  /** One request to send: where it goes, what it carries, what a user would call it. */
  interface Case {
    name: string
    op: Operation
    params: Record<string, string>
    query: Record<string, string>
    /** JSON text, so it may hold what JSON.stringify cannot write (1e309) */
    body?: string
  }

  const openapi = await (await fetch(`${gateway.url}/openapi.json`)).json()
  const operations: Operation[] = []
  for (const [path, methods] of Object.entries<Record<string, any>>(openapi.paths)) {
    for (const [method, op] of Object.entries<any>(methods)) {
      const tier = op.security?.find((s: Record<string, string[]>) => s.apiKey)?.apiKey?.[0]
      if (!tier) continue
      operations.push({
        method: method.toUpperCase(),
        path,
        tier,
        parameters: op.parameters ?? [],
        body: op.requestBody?.content?.['application/json']?.schema,
      })
    }
  }

  const NUL = 'a\u0000b'
  const typesOf = (schema: Schema): string[] => (Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [])
  const variants = (schema: Schema): Schema[] => schema.anyOf ?? schema.oneOf ?? []
  const isNumeric = (schema: Schema) =>
    typesOf(schema).some((type) => type === 'integer' || type === 'number') || variants(schema).some(isNumeric)
  const isString = (schema: Schema) => typesOf(schema).includes('string') || variants(schema).some(isString)
  const stringCandidates = ['1', 'x', 'USDC', 'ethereum', '1d', `0x${'1'.repeat(40)}`, `0x${'1'.repeat(64)}`, 'a'.repeat(64)]

  /** A value the schema accepts (as far as a generic guess can go), so a request fails on the one field a case spoils. */
  function sample(schema: Schema): unknown {
    if ('const' in schema) return schema.const
    if (schema.enum) return schema.enum[0]
    if (schema.default !== undefined) return schema.default
    const options = variants(schema)
    if (options.length > 0) return sample(options.find((option) => !typesOf(option).includes('null')) ?? options[0]!)
    const [type] = typesOf(schema)
    if (type === 'integer' || type === 'number') return Math.max(schema.minimum ?? 1, Math.min(1, schema.maximum ?? 1))
    if (type === 'boolean') return false
    if (type === 'array') return Array.from({ length: schema.minItems ?? 0 }, () => sample(schema.items ?? {}))
    if (type === 'object') {
      return Object.fromEntries((schema.required ?? []).map((name: string) => [name, sample(schema.properties?.[name] ?? {})]))
    }
    if (type === 'string') {
      const fits = (value: string) =>
        (!schema.pattern || new RegExp(schema.pattern, 'u').test(value)) &&
        value.length >= (schema.minLength ?? 0) &&
        value.length <= (schema.maxLength ?? Infinity)
      return stringCandidates.find(fits) ?? 'x'.repeat(Math.max(1, schema.minLength ?? 1))
    }
    return 'x'
  }

  /** Every field of a body schema, inside nested objects and arrays of objects too, as paths: [['policy', 'maxUsdPerSwap'], ['messages', '0', 'content']]. */
  function fieldsOf(schema: Schema, path: string[] = []): Array<{ path: string[]; schema: Schema }> {
    const array = [schema, ...variants(schema)].find((s) => typesOf(s).includes('array'))
    const items = array?.items as Schema | undefined
    if (path.length > 0 && items && [items, ...variants(items)].some((s) => typesOf(s).includes('object'))) {
      return [{ path, schema }, ...fieldsOf(items, [...path, '0'])]
    }
    const object = [schema, ...variants(schema)].find((s) => typesOf(s).includes('object'))
    if (!object) return path.length > 0 ? [{ path, schema }] : []
    const own = Object.entries<Schema>(object.properties ?? {}).flatMap(([name, field]) => fieldsOf(field, [...path, name]))
    // a free-form object (a record of anything): a nested value of its own
    const free =
      object.patternProperties || object.additionalProperties === true || (!object.properties && object.additionalProperties !== false)
    return [...own, ...(free ? [{ path: [...path, 'anything'], schema: {} }] : [])]
  }

  /** The body's JSON text with `value` at `path` (spliced in as raw JSON text). */
  function bodyWith(base: unknown, path: string[], rawValue: string): string {
    const copy = structuredClone(base ?? {}) as Record<string, any>
    let at = copy
    for (const [i, name] of path.slice(0, -1).entries()) {
      if (typeof at[name] !== 'object' || at[name] === null) at[name] = /^[0-9]+$/.test(path[i + 1]!) ? [] : {}
      at = at[name]
    }
    at[path.at(-1)!] = '@@bad@@'
    return JSON.stringify(copy).replace('"@@bad@@"', rawValue)
  }

  function casesOf(op: Operation): Case[] {
    const params = Object.fromEntries(op.parameters.filter((p) => p.in === 'path').map((p) => [p.name, String(sample(p.schema))]))
    const query = Object.fromEntries(
      op.parameters.filter((p) => p.in === 'query' && p.required).map((p) => [p.name, String(sample(p.schema))]),
    )
    const body = op.body ? sample(op.body) : undefined
    const baseBody = op.body ? JSON.stringify(body) : undefined
    const out: Case[] = []
    const add = (name: string, change: Partial<Case>) =>
      out.push({ name: `${op.method} ${op.path}: ${name}`, op, params, query, body: baseBody, ...change })
    for (const p of op.parameters) {
      const bads = [...(isString(p.schema) || !isNumeric(p.schema) ? [NUL] : []), ...(isNumeric(p.schema) ? ['1e309', 'NaN'] : [])]
      for (const bad of bads) {
        if (p.in === 'path') add(`${JSON.stringify(bad)} in path parameter ${p.name}`, { params: { ...params, [p.name]: bad } })
        if (p.in === 'query') add(`${JSON.stringify(bad)} in query parameter ${p.name}`, { query: { ...query, [p.name]: bad } })
      }
    }
    if (op.body) {
      for (const field of fieldsOf(op.body)) {
        const name = field.path.join('.')
        if (isString(field.schema) || !isNumeric(field.schema))
          add(`NUL in body field ${name}`, { body: bodyWith(body, field.path, JSON.stringify(NUL)) })
        if (isNumeric(field.schema)) add(`1e309 in body field ${name}`, { body: bodyWith(body, field.path, '1e309') })
      }
    }
    return out
  }

  function urlOf(c: Pick<Case, 'op' | 'params' | 'query'>): string {
    const path = c.op.path.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(c.params[name] ?? 'x'))
    const search = new URLSearchParams(c.query).toString()
    return `${gateway.url}${path}${search ? `?${search}` : ''}`
  }

  /** The error message of an answer: `{error}`, or OpenAI's `{error: {message}}` on /v1. */
  function errorMessage(text: string): string | undefined {
    try {
      const { error } = JSON.parse(text)
      if (typeof error === 'string') return error
      return typeof error?.message === 'string' ? error.message : undefined
    } catch {
      return undefined
    }
  }

  const cases = operations.flatMap(casesOf)

  t.test('NUL characters, 1e309 and NaN in every parameter and field of every keyed route answer 4xx {error}', async (t) => {
    t.ok(operations.length >= 20, `${operations.length} keyed routes in the OpenAPI document`)
    t.ok(cases.length >= operations.length, `${cases.length} bad requests`)
    const answers = await Promise.all(
      cases.map(async (c) => {
        const res = await fetch(urlOf(c), {
          method: c.op.method,
          headers: { authorization: `Bearer ${keys[c.op.tier]}`, ...(c.body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(c.body === undefined ? {} : { body: c.body }),
        })
        return { c, status: res.status, text: await res.text() }
      }),
    )
    for (const { c, status, text } of answers) {
      const message = errorMessage(text)
      t.ok(status >= 400 && status < 500 && message, `${c.name} → ${status} ${message ?? text.slice(0, 200)}`)
    }
  })

  /** A raw HTTP/1.1 request with a body of `size` bytes: whether the server asked for it (100 Continue) and its answer. */
  function sendLarge(op: Operation, size: number, expectContinue: boolean) {
    const url = new URL(
      urlOf({
        op,
        params: Object.fromEntries(op.parameters.filter((p) => p.in === 'path').map((p) => [p.name, String(sample(p.schema))])),
        query: {},
      }),
    )
    const body = Buffer.from(JSON.stringify({ padding: 'x'.repeat(size) }))
    return new Promise<{ status: number; text: string; continued: boolean }>((resolve, reject) => {
      let continued = false
      const req = httpRequest(url, {
        method: op.method,
        agent: false,
        headers: {
          authorization: `Bearer ${keys[op.tier]}`,
          'content-type': 'application/json',
          'content-length': body.length,
          ...(expectContinue ? { expect: '100-continue' } : {}),
        },
      })
      req.on('continue', () => {
        continued = true
        req.end(body)
      })
      req.on('response', (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString(), continued }))
      })
      req.on('error', reject)
      if (!expectContinue) req.end(body)
    })
  }

  t.test(
    'a 2 MB body to every keyed route that takes one answers 413 naming the limit, with or without Expect: 100-continue',
    async (t) => {
      const withBody = operations.filter((op) => op.body)
      t.ok(withBody.length >= 5, `${withBody.length} keyed routes take a body`)
      for (const op of withBody) {
        for (const expectContinue of [false, true]) {
          const { status, text, continued } = await sendLarge(op, 2 * 1024 * 1024, expectContinue)
          const name = `${op.method} ${op.path}${expectContinue ? ' (Expect: 100-continue)' : ''}`
          t.equal(status, 413, `${name} → ${status} ${text.slice(0, 200)}`)
          t.equal(errorMessage(text), 'request body too large: the limit is 1048576 bytes', `${name} names the limit`)
          if (expectContinue) t.notOk(continued, `${name}: no 100 Continue, the body is never sent`)
        }
      }
    },
  )
})
