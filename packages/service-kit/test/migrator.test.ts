// Migrations on a real Postgres (order, replicas, edits, failures), and the schema check that
// compares schema.prisma with the database, its parser included.
import { fileURLToPath } from 'node:url'
import { cp, mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import t from 'tap'
import { migrate } from '../src/migrator.ts'
import { parsePrismaSchema } from '../src/testSupport/schemaCheck.ts'
import { compareSchemaWithDatabase, freshDatabase } from '../src/testing.ts'

// migrate
const fixtures = fileURLToPath(new URL('./fixtures/', import.meta.url))
const dir = join(fixtures, 'migrations')

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query<T>(sql)).rows
  } finally {
    await client.end()
  }
}

t.test("migrations apply in order, once, recorded in Prisma's table", async (t) => {
  const url = await freshDatabase(t)
  const first = await migrate(url, { schema: 'shop', dir })
  t.same(first.applied, ['20260101000000_init', '20260102000000_more'])
  const again = await migrate(url, { schema: 'shop', dir })
  t.same(again, { applied: [], skipped: 2 })
  const rows = await query<{ migration_name: string; checksum: string; finished_at: Date }>(
    url,
    'SELECT migration_name, checksum, finished_at FROM shop._prisma_migrations ORDER BY migration_name',
  )
  t.same(
    rows.map((r) => r.migration_name),
    first.applied,
  )
  t.ok(rows.every((r) => /^[0-9a-f]{64}$/.test(r.checksum) && r.finished_at instanceof Date))
})

t.test('replicas starting together migrate once (advisory lock)', async (t) => {
  const url = await freshDatabase(t)
  const results = await Promise.all([1, 2, 3, 4].map(() => migrate(url, { schema: 'shop', dir })))
  t.equal(
    results.reduce((n, r) => n + r.applied.length, 0),
    2,
    'each migration applied by exactly one replica',
  )
  const [{ count }] = (await query<{ count: string }>(url, 'SELECT count(*) FROM shop._prisma_migrations')) as [{ count: string }]
  t.equal(Number(count), 2)
})

t.test('an applied migration edited afterwards is refused', async (t) => {
  const url = await freshDatabase(t)
  const copy = await mkdtemp(join(tmpdir(), 'migrations-'))
  await cp(dir, copy, { recursive: true })
  await migrate(url, { schema: 'shop', dir: copy })
  await writeFile(join(copy, '20260102000000_more', 'migration.sql'), 'ALTER TABLE "widgets" ADD COLUMN "other" TEXT;')
  await t.rejects(migrate(url, { schema: 'shop', dir: copy }), /20260102000000_more was changed after it was applied/)
})

t.test('a failing migration rolls back and names itself', async (t) => {
  const url = await freshDatabase(t)
  const copy = await mkdtemp(join(tmpdir(), 'migrations-'))
  await cp(dir, copy, { recursive: true })
  await cp(join(copy, '20260102000000_more'), join(copy, '20260103000000_broken'), { recursive: true })
  await writeFile(join(copy, '20260103000000_broken', 'migration.sql'), 'CREATE TABLE "gadgets" (id TEXT); SELECT nonsense FROM nowhere;')
  await t.rejects(migrate(url, { schema: 'shop', dir: copy }), /20260103000000_broken failed/)
  const tables = await query<{ table_name: string }>(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'shop'")
  t.notOk(
    tables.some((r) => r.table_name === 'gadgets'),
    'the failed migration left nothing behind',
  )
})

t.test('an unreachable database is named with how to fix it', async (t) => {
  await t.rejects(
    migrate('postgresql://postgres@127.0.0.1:1/none', { schema: 'shop', dir }),
    /PostgreSQL is not reachable at postgresql:\/\/postgres@127.0.0.1:1\/none .*set DATABASE_URL/,
  )
})

t.test('the schema check passes when schema.prisma and the database agree', async (t) => {
  const url = await freshDatabase(t)
  await migrate(url, { schema: 'shop', dir })
  t.same(await compareSchemaWithDatabase(join(fixtures, 'schema.prisma'), url, 'shop'), [])
})

t.test('the schema check fails on a model or column missing from the SQL', async (t) => {
  const url = await freshDatabase(t)
  await migrate(url, { schema: 'shop', dir })
  const schema = join(await mkdtemp(join(tmpdir(), 'schema-')), 'schema.prisma')
  const source = await import('node:fs/promises').then((fs) => fs.readFile(join(fixtures, 'schema.prisma'), 'utf8'))
  await writeFile(
    schema,
    source.replace('  size      Int?', '  size      Int?\n  weight    Float') + '\nmodel Gadget {\n  id String @id\n}\n',
  )
  const problems = await compareSchemaWithDatabase(schema, url, 'shop')
  t.same(problems.sort(), ['model Gadget: table shop.Gadget is missing', 'model Widget: column widgets.weight is missing'])
})

t.test('the schema check fails on a type or nullability mismatch', async (t) => {
  const url = await freshDatabase(t)
  await migrate(url, { schema: 'shop', dir })
  const schema = join(await mkdtemp(join(tmpdir(), 'schema-')), 'schema.prisma')
  const source = await import('node:fs/promises').then((fs) => fs.readFile(join(fixtures, 'schema.prisma'), 'utf8'))
  await writeFile(schema, source.replace('size      Int?', 'size      String'))
  const problems = await compareSchemaWithDatabase(schema, url, 'shop')
  t.same(problems.sort(), [
    'model Widget: widgets.size is integer, schema says String',
    'model Widget: widgets.size nullability differs (database NULL)',
  ])
})

// the schema check's parser of schema.prisma, no database
const braces = `
enum Status {
  open
  closed

  @@map("status")
}

model Job {
  id        String @id
  context   Json   @default("{}")
  tags      String @default("{a}")
  status    Status
  createdAt DateTime @map("created_at")

  @@map("jobs")
}

model Step {
  id    Int    @id
  jobId String @map("job_id")
  job   Job    @relation(fields: [jobId], references: [id])
}
`

t.test('a } inside a field (@default("{}")) does not hide the fields after it', async (t) => {
  const { models, enums } = parsePrismaSchema(braces)
  t.same(
    models.map((m) => [m.name, m.table, m.fields.map((f) => f.column)]),
    [
      ['Job', 'jobs', ['id', 'context', 'tags', 'status', 'created_at']],
      ['Step', 'Step', ['id', 'job_id']],
    ],
  )
  t.equal(enums.get('Status'), 'status')
})
