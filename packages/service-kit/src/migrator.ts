import { createHash, randomUUID } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import pg from 'pg'
import { safeUrl, StartupError } from './config.ts'

export interface MigrationPlan {
  /** Postgres schema the service owns; created when missing */
  schema: string
  /** the service's prisma/migrations folder (Prisma's layout: <name>/migration.sql) */
  dir: string
}

export interface MigrationResult {
  applied: string[]
  skipped: number
}

interface Migration {
  name: string
  sql: string
  checksum: string
}

export const quoteIdent = (name: string) => `"${name.replace(/"/g, '""')}"`

/**
 * CREATE SCHEMA only when missing: even with IF NOT EXISTS it needs CREATE on the database,
 * which a component's own role (packages/fleet's roles.ts) does not have; it owns its existing schema instead.
 */
async function createSchemaIfMissing(client: pg.ClientBase, schema: string): Promise<void> {
  const { rowCount } = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])
  if (!rowCount) await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(schema)}`)
}

/** The advisory lock a schema's DDL is done under: migrations, and tables the kit creates itself. */
export const migrationLock = (schema: string) => `ats-migrate:${schema}`

async function readMigrations(dir: string): Promise<Migration[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => [])
  const names = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort()
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(join(dir, name, 'migration.sql'), 'utf8')
      return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') }
    }),
  )
}

/**
 * Applies a service's SQL migrations in name order, each in its own transaction,
 * recording them in `<schema>._prisma_migrations` with Prisma's own columns, so
 * `prisma migrate status` reads the same history. A session advisory lock per
 * schema lets replicas start together: one migrates, the others wait, then skip.
 * An applied migration whose file changed since is refused, not re-run.
 */
export async function migrate(databaseUrl: string, plan: MigrationPlan): Promise<MigrationResult> {
  const migrations = await readMigrations(plan.dir)
  const client = new pg.Client({ connectionString: databaseUrl })
  try {
    await client.connect()
  } catch (error) {
    throw new StartupError(
      `PostgreSQL is not reachable at ${safeUrl(databaseUrl)} (${(error as Error).message}): start PostgreSQL or set DATABASE_URL`,
    )
  }
  const schema = quoteIdent(plan.schema)
  const applied: string[] = []
  try {
    await client.query('SELECT pg_advisory_lock(hashtext($1))', [migrationLock(plan.schema)])
    await createSchemaIfMissing(client, plan.schema)
    await client.query(`CREATE TABLE IF NOT EXISTS ${schema}."_prisma_migrations" (
      "id" VARCHAR(36) PRIMARY KEY NOT NULL,
      "checksum" VARCHAR(64) NOT NULL,
      "finished_at" TIMESTAMPTZ,
      "migration_name" VARCHAR(255) NOT NULL,
      "logs" TEXT,
      "rolled_back_at" TIMESTAMPTZ,
      "started_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
      "applied_steps_count" INTEGER NOT NULL DEFAULT 0
    )`)
    const { rows } = await client.query<{ migration_name: string; checksum: string }>(
      `SELECT migration_name, checksum FROM ${schema}."_prisma_migrations"
       WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL`,
    )
    const done = new Map(rows.map((r) => [r.migration_name, r.checksum]))
    for (const m of migrations) {
      const previous = done.get(m.name)
      if (previous !== undefined) {
        if (previous !== m.checksum) {
          throw new StartupError(`migration ${plan.schema}/${m.name} was changed after it was applied; add a new migration instead`)
        }
        continue
      }
      await client.query('BEGIN')
      try {
        await client.query(`SET LOCAL search_path TO ${schema}`)
        await client.query(m.sql)
        await client.query(
          `INSERT INTO ${schema}."_prisma_migrations" (id, checksum, migration_name, started_at, finished_at, applied_steps_count)
           VALUES ($1, $2, $3, now(), now(), 1)`,
          [randomUUID(), m.checksum, m.name],
        )
        await client.query('COMMIT')
      } catch (error) {
        await client.query('ROLLBACK')
        throw new StartupError(`migration ${plan.schema}/${m.name} failed: ${(error as Error).message}`)
      }
      applied.push(m.name)
    }
    return { applied, skipped: migrations.length - applied.length }
  } finally {
    await client.query('SELECT pg_advisory_unlock(hashtext($1))', [migrationLock(plan.schema)]).catch(() => {})
    await client.end()
  }
}

/**
 * Creates tables the kit keeps in a service's schema (idempotency keys, the event outbox) when
 * missing, under the schema's migration lock, so replicas starting together do not race.
 */
export async function ensureKitTables(pool: pg.Pool, schema: string, statements: string[]): Promise<void> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [migrationLock(schema)])
    await createSchemaIfMissing(client, schema)
    for (const statement of statements) await client.query(statement)
    await client.query('COMMIT')
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  } finally {
    client.release()
  }
}
