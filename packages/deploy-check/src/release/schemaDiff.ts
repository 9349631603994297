/**
 * What changed between two JSON Schemas (as TypeBox emits them), as the values each accepts:
 * every change found is a narrowing (some value the old schema accepted is now refused), a
 * widening (some value the old one refused is now accepted), or both. The compatibility check
 * (compat.ts) decides which of those an older replica breaks on: narrowing a request, and either
 * way for answers and messages.
 *
 * Annotations (description, title, $id, default, examples) are not changes. A property added as
 * optional to an object that is not strict changes nothing: readers ignore properties they do
 * not know.
 */
import { isDeepStrictEqual } from 'node:util'

export interface SchemaChange {
  /** where in the value: `.key.wallet`, `.items[]`, `.*` (any property of a record) */
  path: string
  what: string
  narrows: boolean
  widens: boolean
}

const annotations = new Set(['description', 'title', '$id', '$comment', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly'])

/** lower bounds (raising one narrows) and upper bounds (lowering one narrows) */
const lowerBounds = ['minLength', 'minimum', 'exclusiveMinimum', 'minItems', 'minProperties']
const upperBounds = ['maxLength', 'maximum', 'exclusiveMaximum', 'maxItems', 'maxProperties']
/** the kit's validator refuses control characters in a string that does not say (`refused`); `whitespace` allows tab and line breaks */
const controlCharactersOrder = ['refused', 'whitespace']
/** keywords compared by their own rules below; any other that differs is a change both ways */
const handled = new Set([
  'type',
  'enum',
  'const',
  'anyOf',
  'allOf',
  'properties',
  'required',
  'additionalProperties',
  'patternProperties',
  'items',
  'pattern',
  'format',
  'uniqueItems',
  'controlCharacters',
  ...lowerBounds,
  ...upperBounds,
])

type Schema = Record<string, any>

/** The schema without its annotations, recursively, with `allOf` of objects merged (TypeBox's Intersect). */
function normalize(schema: unknown): Schema {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return {}
  const out: Schema = {}
  for (const [key, value] of Object.entries(schema)) {
    if (annotations.has(key)) continue
    if (key === 'properties' || key === 'patternProperties') {
      out[key] = Object.fromEntries(Object.entries(value as Schema).map(([k, v]) => [k, normalize(v)]))
    } else if (key === 'items' || key === 'additionalProperties' || key === 'propertyNames') {
      out[key] = typeof value === 'object' ? normalize(value) : value
    } else if (key === 'anyOf' || key === 'allOf') {
      out[key] = (value as unknown[]).map(normalize)
    } else {
      out[key] = value
    }
  }
  if (out.allOf) return mergeAllOf(out)
  if (out.const !== undefined) {
    // a literal is a one-value enum: `'a'` becoming `'a' | 'b'` is one value added
    out.enum = [out.const]
    delete out.const
  }
  return out
}

function mergeAllOf(schema: Schema): Schema {
  const { allOf, ...rest } = schema
  const merged: Schema = { ...rest, type: 'object', properties: {}, required: [] }
  for (const part of allOf as Schema[]) {
    Object.assign(merged.properties, part.properties ?? {})
    merged.required.push(...(part.required ?? []))
    if (part.additionalProperties === false) merged.additionalProperties = false
  }
  return merged
}

const typesOf = (schema: Schema): string[] => (Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [])
const isAny = (schema: Schema) => Object.keys(schema).length === 0
const show = (value: unknown) => JSON.stringify(value)

/** A union's alternatives: `anyOf` members (nested ones flattened), or the schema alone. */
function alternatives(schema: Schema): Schema[] {
  return schema.anyOf ? (schema.anyOf as Schema[]).flatMap(alternatives) : [schema]
}

/** What pairs an alternative with its counterpart: its type, and for an object the literal property that tells it apart. */
function keyOf(schema: Schema): string {
  if (Array.isArray(schema.enum) && schema.enum.length === 1 && !typesOf(schema).includes('object')) return 'literal'
  const types = typesOf(schema).join('|') || 'any'
  if (types !== 'object') return types
  for (const [name, property] of Object.entries((schema.properties ?? {}) as Record<string, Schema>)) {
    if (Array.isArray(property.enum) && property.enum.length === 1) return `object ${name}=${show(property.enum[0])}`
  }
  return 'object'
}

type Report = (what: string, narrows: boolean, widens: boolean) => void

/** What records a change found at `path`. */
const reporter =
  (out: SchemaChange[], path: string): Report =>
  (what, narrows, widens) => {
    out.push({ path: path || '.', what, narrows, widens })
  }

/** The changes from `before` to `after`, both normalized or raw. */
export function schemaChanges(before: unknown, after: unknown, path = ''): SchemaChange[] {
  const changes: SchemaChange[] = []
  compare(normalize(before), normalize(after), path, changes)
  return changes
}

function compare(before: Schema, after: Schema, path: string, out: SchemaChange[]): void {
  if (isDeepStrictEqual(before, after)) return
  const change = reporter(out, path)
  if (isAny(before) || isAny(after)) {
    change(isAny(before) ? 'was any value, now constrained' : 'was constrained, now any value', isAny(before), isAny(after))
    return
  }
  if (before.anyOf || after.anyOf) {
    compareUnions(alternatives(before), alternatives(after), path, out)
    return
  }

  const [typesBefore, typesAfter] = [typesOf(before), typesOf(after)]
  if (!isDeepStrictEqual(typesBefore, typesAfter)) {
    const numeric = (types: string[]) => types.length === 1 && (types[0] === 'number' || types[0] === 'integer')
    if (numeric(typesBefore) && numeric(typesAfter)) {
      if (typesAfter[0] === 'integer') change('integer where number was', true, false)
      else change('number where integer was', false, true)
    } else {
      change(`type ${typesBefore.join('|') || 'any'} became ${typesAfter.join('|') || 'any'}`, true, true)
      return
    }
  }
  compareEnums(before.enum, after.enum, change)
  for (const key of lowerBounds) compareKeyword(key, before[key], after[key], 1, change)
  for (const key of upperBounds) compareKeyword(key, before[key], after[key], -1, change)
  for (const key of ['pattern', 'format']) compareKeyword(key, before[key], after[key], 0, change)
  if (Boolean(before.uniqueItems) !== Boolean(after.uniqueItems)) {
    change(
      after.uniqueItems ? 'items must now be unique' : 'items need no longer be unique',
      Boolean(after.uniqueItems),
      !after.uniqueItems,
    )
  }
  if (before.controlCharacters !== after.controlCharacters) {
    const rank = (v: unknown) => controlCharactersOrder.indexOf((v as string | undefined) ?? 'refused')
    const widened = rank(after.controlCharacters) > rank(before.controlCharacters)
    change(`controlCharacters ${before.controlCharacters ?? 'refused'} became ${after.controlCharacters ?? 'refused'}`, !widened, widened)
  }
  for (const key of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (!handled.has(key) && !isDeepStrictEqual(before[key], after[key])) {
      change(`${key} changed from ${show(before[key])} to ${show(after[key])}`, true, true)
    }
  }
  if (before.items || after.items) compare(before.items ?? {}, after.items ?? {}, `${path}[]`, out)
  if (typesBefore.includes('object') || typesAfter.includes('object')) compareObjects(before, after, path, out)
}

function compareEnums(before: unknown[] | undefined, after: unknown[] | undefined, change: Report) {
  if (!before && !after) return
  if (!after) return change(`no longer limited to ${show(before)}`, false, true)
  if (!before) return change(`now limited to ${show(after)}`, true, false)
  const removed = before.filter((v) => !after.some((a) => isDeepStrictEqual(a, v)))
  const added = after.filter((v) => !before.some((b) => isDeepStrictEqual(b, v)))
  if (removed.length > 0) change(`values removed: ${removed.map(show).join(', ')}`, true, false)
  if (added.length > 0) change(`values added: ${added.map(show).join(', ')}`, false, true)
}

/**
 * A keyword that constrains: added narrows, removed widens. `direction` 1: a lower bound (raised
 * narrows); -1: an upper bound (lowered narrows); 0: any other change is both (a pattern, a format).
 */
function compareKeyword(key: string, before: unknown, after: unknown, direction: 1 | -1 | 0, change: Report) {
  if (before === after) return
  if (before === undefined) return change(`${key} ${show(after)} added`, true, false)
  if (after === undefined) return change(`${key} ${show(before)} removed`, false, true)
  if (direction === 0) return change(`${key} changed from ${show(before)} to ${show(after)}`, true, true)
  const narrows = (Number(after) - Number(before)) * direction > 0
  change(`${key} ${show(before)} became ${show(after)}`, narrows, !narrows)
}

function compareObjects(before: Schema, after: Schema, path: string, out: SchemaChange[]): void {
  const propsBefore = (before.properties ?? {}) as Record<string, Schema>
  const propsAfter = (after.properties ?? {}) as Record<string, Schema>
  const requiredBefore = new Set<string>(before.required ?? [])
  const requiredAfter = new Set<string>(after.required ?? [])
  const strictBefore = before.additionalProperties === false
  const strictAfter = after.additionalProperties === false
  for (const name of new Set([...Object.keys(propsBefore), ...Object.keys(propsAfter)])) {
    const at = `${path}.${name}`
    const change = reporter(out, at)
    if (!(name in propsAfter)) {
      // gone: values without it were refused when it was required; values with it are refused by a strict object
      if (requiredBefore.has(name) || strictAfter) {
        const why = [requiredBefore.has(name) ? 'was required' : '', strictAfter ? 'the object is strict, so sending it is refused' : '']
        change(`removed (${why.filter(Boolean).join('; ')})`, strictAfter, requiredBefore.has(name))
      }
      continue
    }
    if (!(name in propsBefore)) {
      if (requiredAfter.has(name)) change('added as required', true, strictBefore)
      else if (strictBefore) change('added to a strict object (readers of the old schema refuse it)', false, true)
      continue
    }
    if (requiredBefore.has(name) && !requiredAfter.has(name)) change('made optional', false, true)
    if (!requiredBefore.has(name) && requiredAfter.has(name)) change('made required', true, false)
    compare(propsBefore[name]!, propsAfter[name]!, at, out)
  }
  if (strictBefore !== strictAfter) {
    reporter(out, path)(strictAfter ? 'made strict (additionalProperties: false)' : 'no longer strict', strictAfter, !strictAfter)
  }
  const [extraBefore, extraAfter] = [before.additionalProperties, after.additionalProperties]
  if (typeof extraBefore === 'object' && typeof extraAfter === 'object') compare(extraBefore, extraAfter, `${path}.*`, out)
  const patternsBefore = (before.patternProperties ?? {}) as Record<string, Schema>
  const patternsAfter = (after.patternProperties ?? {}) as Record<string, Schema>
  for (const pattern of new Set([...Object.keys(patternsBefore), ...Object.keys(patternsAfter)])) {
    compare(patternsBefore[pattern] ?? {}, patternsAfter[pattern] ?? {}, `${path}.*`, out)
  }
}

/**
 * Unions: alternatives equal on both sides are set aside, the rest paired by keyOf and compared;
 * an alternative without a counterpart was removed (narrows) or added (widens). Unions of
 * literals (TypeBox's union of Literal) are compared as one enum.
 */
function compareUnions(before: Schema[], after: Schema[], path: string, out: SchemaChange[]): void {
  const change = reporter(out, path)
  const literals = (list: Schema[]) => (list.every((s) => keyOf(s) === 'literal') ? list.flatMap((s) => s.enum as unknown[]) : undefined)
  const [literalsBefore, literalsAfter] = [literals(before), literals(after)]
  if (literalsBefore && literalsAfter) {
    compareEnums(literalsBefore, literalsAfter, change)
    return
  }
  const remainingAfter = [...after]
  const unmatched: Schema[] = []
  for (const alternative of before) {
    const same = remainingAfter.findIndex((a) => isDeepStrictEqual(a, alternative))
    if (same >= 0) remainingAfter.splice(same, 1)
    else unmatched.push(alternative)
  }
  for (const alternative of unmatched) {
    const counterpart = remainingAfter.findIndex((a) => keyOf(a) === keyOf(alternative))
    if (counterpart < 0) {
      change(`alternative ${keyOf(alternative)} removed`, true, false)
      continue
    }
    const [paired] = remainingAfter.splice(counterpart, 1)
    compare(alternative, paired!, `${path}(${keyOf(alternative)})`, out)
  }
  for (const alternative of remainingAfter) change(`alternative ${keyOf(alternative)} added`, false, true)
}
