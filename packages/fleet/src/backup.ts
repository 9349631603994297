// Backups of the fleet's data and their restore: one pg_dump of every service's schema in one
// snapshot (so the admin's ledger and the agent's jobs are from the same instant), custom format,
// without owners or grants (it restores into any database and role setup), with a manifest of
// what it holds; restored into a database that has none of those schemas yet, all of them or
// the ones named. pnpm db:backup and pnpm db:restore (scripts/backup.ts) run these.
import { execFile } from 'node:child_process'
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { safeUrl } from '@ats/service-kit'
import pg from 'pg'
import { fleetMembers } from './index.ts'

const run = promisify(execFile)

export interface BackupManifest {
  format: 'ats-backup/1'
  takenAt: string
  /** the database it was taken from, without its password */
  from: string
  file: string
  bytes: number
  /** every service schema in the dump, with the migrations applied to it then */
  schemas: Array<{ service: string; schema: string; migrations: string[] }>
}

/** pg_dump and pg_restore take the password from the environment, never from their arguments (visible in ps). */
function connection(databaseUrl: string) {
  const url = new URL(databaseUrl)
  const env = { ...process.env, ...(url.password ? { PGPASSWORD: decodeURIComponent(url.password) } : {}) }
  url.password = ''
  return { url: url.toString(), env }
}

/** Each service that owns a schema, and the schema. */
async function serviceSchemas() {
  return (await fleetMembers()).flatMap((member) =>
    member.definition.database ? [{ service: member.name, schema: member.definition.database.schema }] : [],
  )
}

async function migrationsOf(client: pg.Client, schema: string): Promise<string[]> {
  const rows = await client
    .query<{ migration_name: string }>(`SELECT migration_name FROM "${schema}"."_prisma_migrations" ORDER BY migration_name`)
    .catch(() => ({ rows: [] as Array<{ migration_name: string }> }))
  return rows.rows.map((r) => r.migration_name)
}

const failure = (what: string, error: unknown) => {
  const stderr = (error as { stderr?: string }).stderr?.trim()
  return new Error(`${what}: ${stderr || (error as Error).message}`)
}

/** Dumps every service schema of `databaseUrl` into `dir` (backup.dump and manifest.json). */
export async function backup(databaseUrl: string, dir: string): Promise<BackupManifest> {
  const schemas = await serviceSchemas()
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    const present = new Set((await client.query<{ nspname: string }>('SELECT nspname FROM pg_namespace')).rows.map((r) => r.nspname))
    const found = schemas.filter((s) => present.has(s.schema))
    if (found.length === 0)
      throw new Error(`${safeUrl(databaseUrl)} holds none of the fleet's schemas (${schemas.map((s) => s.schema).join(', ')})`)
    await mkdir(dir, { recursive: true })
    const file = 'backup.dump'
    const { url, env } = connection(databaseUrl)
    const args = [
      '--format=custom',
      '--no-owner',
      '--no-privileges',
      ...found.map((s) => `--schema=${s.schema}`),
      `--file=${join(dir, file)}`,
      url,
    ]
    const withMigrations = []
    for (const s of found) withMigrations.push({ ...s, migrations: await migrationsOf(client, s.schema) })
    await run('pg_dump', args, { env, maxBuffer: 16 * 1024 * 1024 }).catch((error) => {
      throw failure('pg_dump failed', error)
    })
    const manifest: BackupManifest = {
      format: 'ats-backup/1',
      takenAt: new Date().toISOString(),
      from: safeUrl(databaseUrl),
      file,
      bytes: (await stat(join(dir, file))).size,
      schemas: withMigrations,
    }
    await writeFile(join(dir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`)
    return manifest
  } finally {
    await client.end()
  }
}

/**
 * Restores the backup in `dir` into `databaseUrl`: every schema in it, or only those of the
 * services named. Refuses a database that already has one of them (restore into an empty one,
 * then point the services at it): a restore never merges into live data.
 */
export async function restore(dir: string, databaseUrl: string, services?: string[]): Promise<BackupManifest['schemas']> {
  const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as BackupManifest
  if (manifest.format !== 'ats-backup/1') throw new Error(`${dir}/manifest.json is not a backup of this fleet (format ${manifest.format})`)
  const unknown = (services ?? []).filter((name) => !manifest.schemas.some((s) => s.service === name))
  if (unknown.length > 0) {
    throw new Error(`the backup has no ${unknown.join(', ')}; it holds ${manifest.schemas.map((s) => s.service).join(', ')}`)
  }
  const chosen = services ? manifest.schemas.filter((s) => services.includes(s.service)) : manifest.schemas
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    const { rows } = await client.query<{ nspname: string }>('SELECT nspname FROM pg_namespace WHERE nspname = ANY($1::text[])', [
      chosen.map((s) => s.schema),
    ])
    if (rows.length > 0) {
      throw new Error(
        `${safeUrl(databaseUrl)} already has schema ${rows.map((r) => r.nspname).join(', ')}: restore into an empty database (or drop the schema first)`,
      )
    }
    // pg_restore leaves out CREATE SCHEMA when told which schemas to restore: made here, and
    // dropped again when the restore fails (it runs as one transaction, so they are still empty)
    for (const { schema } of chosen) await client.query(`CREATE SCHEMA "${schema}"`)
    const { url, env } = connection(databaseUrl)
    const args = ['--no-owner', '--no-privileges', '--single-transaction', '--exit-on-error', ...chosen.map((s) => `--schema=${s.schema}`)]
    await run('pg_restore', [...args, `--dbname=${url}`, join(dir, manifest.file)], { env, maxBuffer: 16 * 1024 * 1024 }).catch(
      async (error) => {
        for (const { schema } of chosen) await client.query(`DROP SCHEMA IF EXISTS "${schema}"`)
        throw failure('pg_restore failed (nothing was restored)', error)
      },
    )
    return chosen
  } finally {
    await client.end()
  }
}
