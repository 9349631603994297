// Test support: a schema.prisma read and compared with the tables of a live database, so a test
// can tell that the migrations build what the schema says.
import { readFile } from 'node:fs/promises'
import pg from 'pg'

interface PrismaField {
  column: string
  type: string
  optional: boolean
  list: boolean
}

interface PrismaModel {
  name: string
  table: string
  fields: PrismaField[]
}

const mapped = (attributes: string, name: string) => /@map\("([^"]+)"\)/.exec(attributes)?.[1] ?? name

/**
 * The `model` and `enum` blocks of a schema, by line: a block ends at a line holding only `}`
 * (Prisma's format), so a `}` inside a field (`@default("{}")`) does not end it.
 */
function blocks(text: string, kind: 'model' | 'enum'): Array<[name: string, body: string]> {
  const found: Array<[string, string]> = []
  let current: { name: string; lines: string[] } | undefined
  for (const line of text.split('\n')) {
    if (current) {
      if (/^\s*\}\s*$/.test(line)) {
        found.push([current.name, current.lines.join('\n')])
        current = undefined
      } else current.lines.push(line)
      continue
    }
    const start = new RegExp(`^\\s*${kind}\\s+(\\w+)\\s*\\{\\s*$`).exec(line)
    if (start) current = { name: start[1]!, lines: [] }
  }
  return found
}

/** Reads the models and enums of a schema.prisma: enough to compare it with a database. */
export function parsePrismaSchema(source: string): { models: PrismaModel[]; enums: Map<string, string> } {
  const text = source.replace(/\/\/.*$/gm, '')
  const enums = new Map<string, string>()
  for (const [name, body] of blocks(text, 'enum')) enums.set(name, /@@map\("([^"]+)"\)/.exec(body)?.[1] ?? name)
  const models = blocks(text, 'model')
  const modelNames = new Set(models.map(([name]) => name))
  return {
    enums,
    models: models.map(([name, body]) => {
      const fields: PrismaField[] = []
      for (const line of body.split('\n').map((l) => l.trim())) {
        const match = /^(\w+)\s+(\w+)(\[\])?(\?)?\s*(.*)$/.exec(line)
        if (!match) continue
        const [, field, type, list, optional, attributes] = match
        if (modelNames.has(type!) || attributes!.includes('@relation')) continue
        fields.push({ column: mapped(attributes!, field!), type: type!, optional: Boolean(optional), list: Boolean(list) })
      }
      return { name, table: /@@map\("([^"]+)"\)/.exec(body)?.[1] ?? name, fields }
    }),
  }
}

const compatible: Record<string, string[]> = {
  String: ['text', 'character varying', 'character', 'uuid'],
  Int: ['integer', 'smallint'],
  BigInt: ['bigint'],
  Boolean: ['boolean'],
  DateTime: ['timestamp with time zone', 'timestamp without time zone', 'date'],
  Float: ['double precision', 'real'],
  Decimal: ['numeric'],
  Json: ['jsonb', 'json'],
  Bytes: ['bytea'],
}

/**
 * Compares a service's schema.prisma with its migrated Postgres schema: every
 * model has its table, every scalar field its column, of a compatible type and
 * nullability; a NOT NULL column without default that Prisma does not know of is
 * reported too (inserts would fail). Returns the problems; none means they agree.
 */
export async function compareSchemaWithDatabase(schemaPath: string, databaseUrl: string, pgSchema: string): Promise<string[]> {
  const { models, enums } = parsePrismaSchema(await readFile(schemaPath, 'utf8'))
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    const { rows } = await client.query<{
      table_name: string
      column_name: string
      data_type: string
      udt_name: string
      is_nullable: 'YES' | 'NO'
      column_default: string | null
    }>(
      `SELECT table_name, column_name, data_type, udt_name, is_nullable, column_default
       FROM information_schema.columns WHERE table_schema = $1`,
      [pgSchema],
    )
    const problems: string[] = []
    for (const model of models) {
      const columns = new Map(rows.filter((r) => r.table_name === model.table).map((r) => [r.column_name, r]))
      if (columns.size === 0) {
        problems.push(`model ${model.name}: table ${pgSchema}.${model.table} is missing`)
        continue
      }
      for (const field of model.fields) {
        const column = columns.get(field.column)
        if (!column) {
          problems.push(`model ${model.name}: column ${model.table}.${field.column} is missing`)
          continue
        }
        const enumName = enums.get(field.type)
        const typeOk = field.list
          ? column.data_type === 'ARRAY'
          : enumName
            ? column.data_type === 'USER-DEFINED' && column.udt_name === enumName
            : (compatible[field.type] ?? []).includes(column.data_type)
        if (!typeOk) problems.push(`model ${model.name}: ${model.table}.${field.column} is ${column.data_type}, schema says ${field.type}`)
        if ((column.is_nullable === 'YES') !== field.optional) {
          problems.push(
            `model ${model.name}: ${model.table}.${field.column} nullability differs (database ${column.is_nullable === 'YES' ? 'NULL' : 'NOT NULL'})`,
          )
        }
        columns.delete(field.column)
      }
      for (const extra of columns.values()) {
        if (extra.is_nullable === 'NO' && extra.column_default === null) {
          problems.push(`model ${model.name}: ${model.table}.${extra.column_name} is NOT NULL without default but not in the schema`)
        }
      }
    }
    return problems
  } finally {
    await client.end()
  }
}
