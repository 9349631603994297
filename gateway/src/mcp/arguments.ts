// What a tool call's arguments may be, checked before its request is made: the tool's input
// schema (its route's own), and path values that stay in their one URL segment.
import type { TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import type { JsonSchema, McpTool } from './tools.ts'

type Validator = ReturnType<typeof Compile>

/** one compiled validator per input schema: the tool table is built once, and compiling costs about a millisecond */
const validators = new WeakMap<JsonSchema, Validator>()

function validatorOf(schema: JsonSchema): Validator {
  let validator = validators.get(schema)
  if (!validator) {
    validator = Compile(schema as TSchema)
    validators.set(schema, validator)
  }
  return validator
}

/** The property names of an object schema (a route's params, query or body). */
export const propertyNames = (schema: TSchema | JsonSchema | undefined) =>
  Object.keys((schema as { properties?: object } | undefined)?.properties ?? {})

/** A JSON pointer into the arguments as a reader names it: `/config/amount` is `config.amount`. */
const argumentName = (pointer: string) =>
  pointer
    .slice(1)
    .split('/')
    .map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'))
    .join('.')

/** The text with each %-escape decoded once, one byte per escape: `%2F` is `/`, `%252F` is `%2F`. */
const percentDecoded = (text: string) =>
  text.replace(/%([0-9a-fA-F]{2})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)))

/**
 * What keeps a path value from being one URL segment of its route, if anything. Encoded, `/`
 * would stay in the segment, yet `.` and `..` are resolved away before routing (the request
 * would reach another route: `/predictions/..` is `/`), and a service behind the proxy may
 * decode an escape the gateway left alone; so these are refused as they are and once decoded.
 */
function segmentProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' && typeof value !== 'number') return 'must be a string'
  let text = String(value)
  for (;;) {
    if (text === '') return 'cannot be empty'
    if (text === '.' || text === '..') return 'cannot be . or ..'
    if (/[/\\?#]/.test(text)) return 'cannot contain /, \\, ? or # (nor their %-escapes)'
    const decoded = percentDecoded(text)
    if (decoded === text) return undefined
    text = decoded
  }
}

/**
 * What is wrong with a tool call's arguments, or nothing: an argument the tool does not take, a
 * required one missing, one its input schema refuses (type, pattern, range: the route's own rules),
 * or a path value that would leave its segment.
 */
export function argumentsProblem(tool: McpTool, args: Record<string, unknown>): string | undefined {
  const known = propertyNames(tool.inputSchema)
  const unknown = Object.keys(args).filter((name) => !known.includes(name))
  if (unknown.length) return `unknown argument ${unknown.join(', ')}: ${tool.name} takes ${known.join(', ') || 'no arguments'}`
  const required = (tool.inputSchema.required as string[] | undefined) ?? []
  const missing = required.filter((name) => args[name] === undefined)
  if (missing.length) return `missing argument ${missing.join(', ')}`

  const validator = validatorOf(tool.inputSchema)
  if (!validator.Check(args)) {
    const errors = [...validator.Errors(args)]
    const error = errors.find((e) => e.instancePath !== '') ?? errors[0]
    if (!error) return 'arguments do not match the input schema'
    return error.instancePath ? `argument ${argumentName(error.instancePath)} ${error.message}` : `arguments ${error.message}`
  }
  for (const name of propertyNames(tool.parts.params)) {
    const problem = segmentProblem(args[name])
    if (problem) return `argument ${name} ${problem}`
  }
  return undefined
}
