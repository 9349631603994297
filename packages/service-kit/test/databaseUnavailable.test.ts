// Which errors mean "the database is out of reach for now" (a retryable 503, a message
// redelivered rather than dead-lettered): the shapes Prisma's pg adapter and pg itself give,
// as seen when Postgres restarts or fails over under load (pnpm rehearse).
import t from 'tap'
import { isDatabaseUnavailable } from '../src/errors.ts'

/** a PrismaClientKnownRequestError as the driver adapter fills it in */
const prisma = (code: string, cause: Record<string, unknown>) =>
  Object.assign(new Error('Raw query failed.'), { code, meta: { driverAdapterError: { name: 'DriverAdapterError', cause } } })

t.test('unavailable: not reachable, the connection cut under a query, shutting down, wrapped in a cause', async (t) => {
  t.ok(isDatabaseUnavailable(prisma('P2010', { kind: 'DatabaseNotReachable' })), "can't reach the server")
  t.ok(isDatabaseUnavailable(prisma('P2010', { kind: 'ConnectionClosed' })), 'server has closed the connection (a crash mid-query)')
  t.ok(isDatabaseUnavailable(prisma('P2010', { kind: 'postgres', originalCode: '57P01' })), 'admin shutdown')
  t.ok(isDatabaseUnavailable(Object.assign(new Error('the database system is starting up'), { code: '57P03' })), 'pg: starting up')
  t.ok(isDatabaseUnavailable(Object.assign(new Error('timed out'), { code: 'P1001' })), 'Prisma P1001')
  const wrapped = new Error('recording 3 payments failed', { cause: prisma('P2010', { kind: 'ConnectionClosed' }) })
  t.ok(isDatabaseUnavailable(wrapped), 'an error whose cause is one')
})

t.test('available: the query itself was wrong, or the error is not the database', async (t) => {
  t.notOk(isDatabaseUnavailable(prisma('P2010', { kind: 'postgres', originalCode: '22003' })), 'a value out of range')
  t.notOk(isDatabaseUnavailable(Object.assign(new Error('duplicate key'), { code: 'P2002' })), 'a unique violation')
  t.notOk(isDatabaseUnavailable(new Error('connect ECONNREFUSED 127.0.0.1:8545')), 'another service refused')
  t.notOk(isDatabaseUnavailable(undefined), 'nothing')
})
