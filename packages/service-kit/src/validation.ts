// What every route's params, query and body must be beyond their own schemas: no control characters, bounded numbers.
import { controlCharactersKeyword } from '@ats/contracts'
import type { RouteOptions } from 'fastify'

/**
 * Two keywords the kit adds to Fastify's Ajv, and the pass (`hardenRouteSchema`, an onRoute
 * hook) that puts them into every route's request schemas, so no service has to remember them:
 * - `controlCharacters` on every string: `'refused'` (the default: identifiers, labels, path and
 *   query values) refuses C0 control characters and DEL; `'whitespace'` (free text a person
 *   writes, declared with `FreeText()`) allows tab, line feed and carriage return.
 * - `safeNumber` on every integer and number: an integer must be a safe integer (|n| ≤ 2^53 - 1),
 *   a number finite. Query coercion turns `1e309` into Infinity, which Ajv's `integer` accepts.
 * - `safeContent` at the root of params, query and body: no NUL in any string or key, nested
 *   ones included (free-form records, unknown content), and no non-finite number (JSON.parse
 *   reads `1e309` as Infinity). Postgres refuses NUL in text and jsonb with a 500.
 */
type ControlPolicy = 'refused' | 'whitespace'
type Schema = Record<string, unknown>
interface ValidationError {
  keyword: string
  message: string
  params: Record<string, unknown>
  instancePath?: string
}
interface KeywordContext {
  instancePath: string
}

const typesOf = (schema: Schema): unknown[] => (Array.isArray(schema.type) ? schema.type : [schema.type])
const hex = (code: number) => `U+${code.toString(16).toUpperCase().padStart(4, '0')}`

/** The first control character of `text` the policy refuses, as a code. */
function firstControl(text: string, policy: ControlPolicy): number | undefined {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code >= 0x20 && code !== 0x7f) continue
    if (policy === 'whitespace' && (code === 0x09 || code === 0x0a || code === 0x0d)) continue
    return code
  }
  return undefined
}

/** An Ajv `validate` keyword from a function naming the problem, if any (Ajv reads the errors off the function). */
type Check = ((value: any, data: unknown, parent: Schema, context?: KeywordContext) => boolean) & { errors?: ValidationError[] | null }
function keywordCheck(
  problem: (value: any, data: unknown, parent: Schema, context?: KeywordContext) => ValidationError | undefined,
): Check {
  const check: Check = (value, data, parent, context) => {
    const error = problem(value, data, parent, context)
    check.errors = error ? [error] : null
    return !error
  }
  return check
}

const controlCharacters = keywordCheck((policy: ControlPolicy, data) => {
  if (typeof data !== 'string') return undefined
  const code = firstControl(data, policy)
  if (code === undefined) return undefined
  const allowed = policy === 'whitespace' ? ' other than tab, line feed and carriage return' : ''
  return {
    keyword: controlCharactersKeyword,
    message: `must not contain control characters${allowed} (found ${hex(code)})`,
    params: { policy },
  }
})

const safeNumber = keywordCheck((_, data, parent) => {
  if (typeof data !== 'number') return undefined
  const integer = typesOf(parent).includes('integer')
  if (integer ? Number.isSafeInteger(data) : Number.isFinite(data)) return undefined
  const message = integer
    ? `must be an integer between -${Number.MAX_SAFE_INTEGER} and ${Number.MAX_SAFE_INTEGER}`
    : 'must be a finite number'
  return { keyword: 'safeNumber', message, params: {} }
})

const pointer = (path: string, key: string) => `${path}/${String(key).replace(/~/g, '~0').replace(/\//g, '~1')}`

/** The first NUL or non-finite number anywhere inside `value`: where, and what is wrong. */
function firstUnsafe(value: unknown): { path: string; message: string } | undefined {
  const stack: Array<[unknown, string]> = [[value, '']]
  while (stack.length > 0) {
    const [item, path] = stack.pop()!
    if (typeof item === 'string') {
      if (item.includes('\u0000')) return { path, message: 'must not contain NUL characters (U+0000)' }
    } else if (typeof item === 'number') {
      if (!Number.isFinite(item)) return { path, message: 'must be a finite number' }
    } else if (item !== null && typeof item === 'object') {
      const entries = Array.isArray(item) ? item.map((inner, i) => [String(i), inner] as const) : Object.entries(item)
      const named = entries.find(([key]) => key.includes('\u0000'))
      if (named)
        return {
          path: pointer(path, named[0].replaceAll('\u0000', '\\u0000')),
          message: 'must not have NUL characters (U+0000) in its name',
        }
      // pushed last to first, so the first problem in the document's order is the one named
      for (let i = entries.length - 1; i >= 0; i--) stack.push([entries[i]![1], pointer(path, entries[i]![0])])
    }
  }
  return undefined
}

const safeContent = keywordCheck((_, data, __, context) => {
  const found = firstUnsafe(data)
  if (!found) return undefined
  return { keyword: 'safeContent', message: found.message, params: {}, instancePath: `${context?.instancePath ?? ''}${found.path}` }
})

/** The Ajv plugin of the kit's keywords; Fastify takes it as `ajv.plugins` (Ajv is Fastify's, not a dependency of ours). */
export function kitKeywords<Ajv extends { addKeyword(definition: any): unknown }>(ajv: Ajv): Ajv {
  ajv.addKeyword({ keyword: controlCharactersKeyword, schemaType: 'string', validate: controlCharacters, errors: true })
  ajv.addKeyword({ keyword: 'safeNumber', schemaType: 'boolean', validate: safeNumber, errors: true })
  // in the object and array groups, after `properties` and `items`: a field's own rule speaks first
  ajv.addKeyword({ keyword: 'safeContent', type: ['object', 'array'], schemaType: 'boolean', validate: safeContent, errors: true })
  return ajv
}

const nested = ['items', 'additionalProperties', 'not', 'if', 'then', 'else', 'contains', 'propertyNames']
const nestedLists = ['anyOf', 'oneOf', 'allOf', 'prefixItems']
const nestedMaps = ['properties', 'patternProperties']

/** A copy of `schema` with the kit's keywords on every string and number inside it. */
function harden(schema: unknown): unknown {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) return schema
  const out: Schema = { ...(schema as Schema) }
  const types = typesOf(out)
  if (types.includes('string') && out[controlCharactersKeyword] === undefined) out[controlCharactersKeyword] = 'refused'
  if (types.includes('integer') || types.includes('number')) out.safeNumber = true
  for (const key of nested) if (key in out) out[key] = harden(out[key])
  for (const key of nestedLists) if (Array.isArray(out[key])) out[key] = (out[key] as unknown[]).map(harden)
  for (const key of nestedMaps) {
    if (out[key] && typeof out[key] === 'object')
      out[key] = Object.fromEntries(Object.entries(out[key] as Schema).map(([name, inner]) => [name, harden(inner)]))
  }
  return out
}

/** A request part's schema with the kit's rules: every string and number inside, and the whole content. */
export const hardenRequestSchema = (schema: unknown): Schema => ({ ...(harden(schema) as Schema), safeContent: true })

/** The onRoute hook: each route's params, query and body schemas get the kit's rules (copies; contracts are shared). */
export function hardenRouteSchema(route: RouteOptions): void {
  const { schema } = route
  if (!schema) return
  const parts = ['params', 'querystring', 'body'] as const
  route.schema = {
    ...schema,
    ...Object.fromEntries(parts.filter((part) => schema[part]).map((part) => [part, hardenRequestSchema(schema[part])])),
  }
}
