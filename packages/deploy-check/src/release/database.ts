/**
 * The database side of a rolling upgrade: every service's tables and columns and the migrations
 * they come from (prisma/migrations/<name>/migration.sql, applied in name order), for the
 * release snapshot (release/columns.json); and the check that a migration newer than the
 * release drops or renames no table or column the release still has: old replicas, still
 * running while the new ones migrate, read and write them.
 *
 * The columns are the migrations' SQL replayed (CREATE TABLE, ADD/DROP/RENAME): what the
 * database holds, columns Prisma does not model included (a generated search column). Each
 * column schema.prisma maps must be among them, or the SQL reader missed a statement.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

export interface ServiceColumns {
  /** the migration folders the release was cut with, in order */
  migrations: string[]
  /** table -> its columns */
  tables: Record<string, string[]>
}

/** The services with a Prisma schema: services/<name>/prisma/schema.prisma. */
export function databaseServices(root: string): string[] {
  return readdirSync(join(root, 'services'))
    .filter((name) => existsSync(join(root, 'services', name, 'prisma', 'schema.prisma')))
    .sort()
}

export function migrationNames(root: string, service: string): string[] {
  const dir = join(root, 'services', service, 'prisma', 'migrations')
  if (!existsSync(dir)) return []
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && existsSync(join(dir, e.name, 'migration.sql')))
    .map((e) => e.name)
    .sort()
}

export function migrationSql(root: string, service: string, migration: string): string {
  return readFileSync(join(root, 'services', service, 'prisma', 'migrations', migration, 'migration.sql'), 'utf8')
}

/** Tables and columns of one schema.prisma: each model's table (@@map or its name), each scalar field's column (@map or its name). */
export function prismaTables(schema: string): Record<string, string[]> {
  const text = schema.replace(/\/\/.*$/gm, '')
  const blocks = [...text.matchAll(/^\s*(model|enum|type|view)\s+(\w+)\s*\{([^}]*)\}/gm)]
  const models = new Set(blocks.filter((b) => b[1] === 'model').map((b) => b[2]!))
  const tables: Record<string, string[]> = {}
  for (const [, kind, name, body] of blocks) {
    if (kind !== 'model') continue
    const table = /@@map\(\s*"([^"]+)"\s*\)/.exec(body!)?.[1] ?? name!
    const columns: string[] = []
    for (const line of body!.split('\n')) {
      const field = /^\s*(\w+)\s+(\w+)(\[\])?\??\s*(.*)$/.exec(line)
      if (!field) continue
      const [, fieldName, type, , attributes] = field
      // a relation field (another model, or @relation) is Prisma's, not a column
      if (models.has(type!) || attributes!.includes('@relation')) continue
      columns.push(/@map\(\s*"([^"]+)"\s*\)/.exec(attributes!)?.[1] ?? fieldName!)
    }
    tables[table] = columns
  }
  return tables
}

/** Every service's migrations and the tables and columns they leave; an error names a column schema.prisma maps that the SQL does not create. */
export function readColumns(root: string): Record<string, ServiceColumns> {
  const services: Record<string, ServiceColumns> = {}
  for (const service of databaseServices(root)) {
    const tables = migratedTables(root, service)
    const mapped = prismaTables(readFileSync(join(root, 'services', service, 'prisma', 'schema.prisma'), 'utf8'))
    for (const [table, columns] of Object.entries(mapped)) {
      const missing = columns.filter((column) => !tables[table]?.includes(column))
      if (missing.length > 0) {
        throw new Error(
          `services/${service}: schema.prisma maps ${table}.${missing.join(', ')}, which its migrations' SQL (as read here) does not create`,
        )
      }
    }
    services[service] = { migrations: migrationNames(root, service), tables }
  }
  return services
}

/** What one migration statement does to the tables: creates or drops a table, adds, drops or renames a column, renames a table. */
export type TableChange =
  | { kind: 'create'; table: string; columns: string[] }
  | { kind: 'add'; table: string; column: string }
  | { kind: 'drop'; table: string; column?: string }
  | { kind: 'rename'; table: string; column?: string; to: string }

const ident = String.raw`(?:"(?:[^"]|"")+"|[\w$]+)`
/** a possibly schema-qualified name: its last part, unquoted (unquoted names fold to lower case) */
const lastName = (qualified: string) => {
  const parts = qualified.match(new RegExp(ident, 'g')) ?? [qualified]
  const last = parts[parts.length - 1]!
  return last.startsWith('"') ? last.slice(1, -1).replace(/""/g, '"') : last.toLowerCase()
}
const qualifiedName = String.raw`(${ident}(?:\s*\.\s*${ident})?)`
/** what a CREATE TABLE item or an ADD starts with when it is not a column */
const notColumn = /^(CONSTRAINT|PRIMARY|UNIQUE|CHECK|FOREIGN|EXCLUDE|LIKE)\b/i

/** Splits on `sep` outside quotes and parentheses. */
function splitTopLevel(text: string, sep: string): string[] {
  const parts: string[] = []
  let depth = 0
  let quote = ''
  let current = ''
  for (const ch of text) {
    if (quote) {
      if (ch === quote) quote = ''
    } else if (ch === '"' || ch === "'") quote = ch
    else if (ch === '(') depth++
    else if (ch === ')') depth--
    else if (ch === sep && depth === 0) {
      parts.push(current)
      current = ''
      continue
    }
    current += ch
  }
  parts.push(current)
  return parts.map((p) => p.trim()).filter(Boolean)
}

/** What a migration's SQL does to tables and columns (CREATE/DROP TABLE, ALTER TABLE … ADD/DROP/RENAME); other statements are left out. */
export function tableChanges(sql: string): TableChange[] {
  const text = sql.replace(/--.*$/gm, '').replace(/\/\*[\s\S]*?\*\//g, '')
  const found: TableChange[] = []
  for (const statement of splitTopLevel(text, ';')) {
    const create = new RegExp(
      String.raw`^CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?${qualifiedName}\s*\(([\s\S]*)\)`,
      'i',
    ).exec(statement)
    if (create) {
      const items = splitTopLevel(create[2]!, ',').filter((item) => !notColumn.test(item))
      found.push({ kind: 'create', table: lastName(create[1]!), columns: items.map((item) => lastName(new RegExp(ident).exec(item)![0])) })
      continue
    }
    const dropTable = /^DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?([\s\S]+?)(?:\s+(?:CASCADE|RESTRICT))?$/i.exec(statement)
    if (dropTable) {
      for (const name of splitTopLevel(dropTable[1]!, ',')) found.push({ kind: 'drop', table: lastName(name) })
      continue
    }
    const alter = new RegExp(String.raw`^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?${qualifiedName}\s+([\s\S]+)$`, 'i').exec(statement)
    if (!alter) continue
    const table = lastName(alter[1]!)
    for (const action of splitTopLevel(alter[2]!, ',')) {
      const add = new RegExp(String.raw`^ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(${ident})`, 'i').exec(action)
      if (add && !notColumn.test(action.replace(/^ADD\s+/i, ''))) {
        found.push({ kind: 'add', table, column: lastName(add[1]!) })
        continue
      }
      const renameTable = new RegExp(String.raw`^RENAME\s+TO\s+(${ident})`, 'i').exec(action)
      if (renameTable) {
        found.push({ kind: 'rename', table, to: lastName(renameTable[1]!) })
        continue
      }
      const renameColumn = new RegExp(String.raw`^RENAME\s+(?:COLUMN\s+)?(?!CONSTRAINT\b|TO\b)(${ident})\s+TO\s+(${ident})`, 'i').exec(
        action,
      )
      if (renameColumn) {
        found.push({ kind: 'rename', table, column: lastName(renameColumn[1]!), to: lastName(renameColumn[2]!) })
        continue
      }
      const dropColumn = new RegExp(String.raw`^DROP\s+(?:COLUMN\s+)?(?!CONSTRAINT\b)(?:IF\s+EXISTS\s+)?(${ident})`, 'i').exec(action)
      if (dropColumn) found.push({ kind: 'drop', table, column: lastName(dropColumn[1]!) })
    }
  }
  return found
}

/** The tables and columns a service's migrations leave, applied in order. */
export function migratedTables(root: string, service: string): Record<string, string[]> {
  const tables = new Map<string, string[]>()
  for (const migration of migrationNames(root, service)) {
    for (const change of tableChanges(migrationSql(root, service, migration))) {
      const columns = tables.get(change.table) ?? []
      if (change.kind === 'create') tables.set(change.table, [...change.columns])
      else if (change.kind === 'add') tables.set(change.table, [...columns.filter((c) => c !== change.column), change.column])
      else if (change.kind === 'drop' && change.column === undefined) tables.delete(change.table)
      else if (change.kind === 'drop')
        tables.set(
          change.table,
          columns.filter((c) => c !== change.column),
        )
      else if (change.column === undefined) {
        tables.delete(change.table)
        tables.set(change.to, columns)
      } else
        tables.set(
          change.table,
          columns.map((c) => (c === change.column ? change.to : c)),
        )
    }
  }
  return Object.fromEntries([...tables].sort(([a], [b]) => a.localeCompare(b)))
}

/**
 * Every migration newer than the release (not among its migrations) that drops or renames a
 * table or column release/columns.json still lists: one problem each.
 */
export function checkMigrations(root: string, released: Record<string, ServiceColumns>): string[] {
  const problems: string[] = []
  for (const [service, release] of Object.entries(released)) {
    const known = new Set(release.migrations)
    for (const migration of migrationNames(root, service).filter((name) => !known.has(name))) {
      for (const change of tableChanges(migrationSql(root, service, migration))) {
        if (change.kind !== 'drop' && change.kind !== 'rename') continue
        const columns = release.tables[change.table]
        if (!columns) continue
        if (change.column !== undefined && !columns.includes(change.column)) continue
        const what = change.column === undefined ? `table ${change.table}` : `column ${change.table}.${change.column}`
        const how = change.kind === 'drop' ? 'drops' : `renames to ${change.to}`
        problems.push(
          `${service} migration ${migration} ${how} ${what}, which the release still has: replicas of the release read and write it during the upgrade. ` +
            'Expand/contract: drop it in the release after the one that stopped reading it; to drop it now, remove it from release/columns.json when cutting the next release',
        )
      }
    }
  }
  return problems
}
