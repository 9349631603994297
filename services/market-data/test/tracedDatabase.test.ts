// The kit's database spans (tracing on): a span per Prisma operation and raw query, and the
// query hook that makes them keeps batch and interactive transactions atomic.
import { startTestTracing } from '@ats/service-kit/testing'
import t from 'tap'
import { migratedDb } from './helpers.ts'

// before the client is made: createDatabase adds the hook only with tracing on
const exporter = await startTestTracing()

t.test('queries are spans; transactions stay transactions', async (t) => {
  const { db } = await migratedDb(t)
  await db.indexCursor.create({ data: { name: 'kept', nextBlock: 1n } })
  const created = exporter.getFinishedSpans().find((s) => s.name === 'db.create IndexCursor')
  t.ok(created, 'a model operation is a span')
  t.match(created?.attributes, {
    'db.system.name': 'postgresql',
    'db.operation.name': 'create',
    'db.collection.name': 'IndexCursor',
    'db.namespace': 'market',
  })

  await db.$queryRaw`SELECT 1`
  t.ok(
    exporter.getFinishedSpans().some((s) => s.name === 'db.$queryRaw'),
    'raw SQL is a span',
  )

  // a batch whose second write fails leaves nothing of the first
  await t.rejects(
    db.$transaction([
      db.indexCursor.update({ where: { name: 'kept' }, data: { nextBlock: 2n } }),
      db.indexCursor.create({ data: { name: 'kept', nextBlock: 3n } }),
    ]),
  )
  t.equal((await db.indexCursor.findUnique({ where: { name: 'kept' } }))?.nextBlock, 1n, 'the batch was rolled back')

  await t.rejects(
    db.$transaction(async (tx) => {
      await tx.indexCursor.update({ where: { name: 'kept' }, data: { nextBlock: 5n } })
      throw new Error('changed my mind')
    }),
    /changed my mind/,
  )
  t.equal((await db.indexCursor.findUnique({ where: { name: 'kept' } }))?.nextBlock, 1n, 'the interactive transaction was rolled back')
  t.ok(
    exporter.getFinishedSpans().some((s) => s.name === 'db.update IndexCursor'),
    'queries in transactions are spans',
  )
})
