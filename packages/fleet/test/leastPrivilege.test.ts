// Least privilege between services (docs/security.md), on a real nats-server started here with the
// generated authorization and on the test Postgres: each component's credentials do its own
// work and nothing of another's.
import { randomBytes } from 'node:crypto'
import { mkdtemp, cp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { natsChannels } from '@ats/contracts'
import { fleetComponents, natsAuthorization, type FleetComponent } from '@ats/contracts/permissions'
import {
  addNatsService,
  callEndpoint,
  connectNats,
  createError,
  ensureStream,
  migrate,
  openBucket,
  publish,
  serveEndpoint,
  subscribe,
} from '@ats/service-kit'
import { eventually, freshDatabase, testInfra } from '@ats/service-kit/testing'
import type { NatsConnection } from 'nats'
import pg from 'pg'
import pino from 'pino'
import t, { type Test } from 'tap'
import { startNatsServer } from '../src/natsServer.ts'
import { databaseRoleOf, ensureRoles, roleUrl } from '../src/roles.ts'

const Refused = createError<[string]>('ATS_ERR_TEST_REFUSED', '%s', 409)
const log = pino({ level: 'silent' })
const secret = () => randomBytes(18).toString('base64url')

t.test('NATS: each component may use the subjects its contract declares, and no others', async (t) => {
  const namespace = `lp${randomBytes(4).toString('hex')}`
  const channels = natsChannels(namespace)
  const passwords = Object.fromEntries(fleetComponents.map((c) => [c, secret()])) as Record<FleetComponent, string>
  const server = await startNatsServer({ authorization: natsAuthorization({ namespace, passwords }) })
  t.teardown(() => server.stop())
  const host = server.url.slice('nats://'.length)
  const as = async (component: FleetComponent): Promise<NatsConnection> => {
    // the credentials travel in NATS_URL, as every process gets them
    const nc = await connectNats(`nats://${component}:${encodeURIComponent(passwords[component])}@${host}`, component)
    t.teardown(() => nc.close())
    return nc
  }
  /** the server logs each refused publish and subscription with the user and the subject */
  const violation = async (t: Test, kind: 'Publish' | 'Subscription', user: string, subject: string) => {
    const what = `a ${kind} Violation of ${user} on ${subject}`
    t.ok(
      await eventually(what, async () => server.log().includes(`${kind} Violation - User "${user}", Subject "${subject}"`) || undefined),
      what,
    )
  }

  t.test('a wrong password is refused', async (t) => {
    await t.rejects(connectNats(`nats://trading:${secret()}@${host}`, 'trading'), /Authorization Violation/i)
    await t.rejects(connectNats(server.url, 'anonymous'), /Authorization Violation/i)
  })

  const trading = await as('trading')
  const executed: string[] = []
  const tradingService = await addNatsService(trading, 'trading', '0.0.0', 'test')
  serveEndpoint(tradingService, channels.trading.tokens, log, async () => ({ chainId: 31337, tokens: [] }))
  serveEndpoint(tradingService, channels.trading.execute, log, async (request) => {
    executed.push(request.idempotencyKey)
    throw new Refused('refused by the test')
  })
  await trading.flush()
  const swap = { tokenIn: 'WETH', tokenOut: 'USDC', amountIn: '1', slippageBps: 50, idempotencyKey: 'run:test' } as Parameters<
    (typeof channels.trading.execute)['request']['encode']
  >[0]

  t.test('market-data cannot ask trading to execute a swap: its publish is refused, trading never hears it', async (t) => {
    const marketData = await as('market-data')
    const error = await callEndpoint(
      marketData,
      channels.trading.execute,
      { ...swap, idempotencyKey: 'forged' },
      { identity: { keyId: 'key_someone' }, timeoutMs: 1000 },
    ).catch((e: Error) => e)
    t.match(error, { statusCode: 503, message: /Permissions Violation/ }, 'the caller is told it may not')
    await violation(t, 'Publish', 'market-data', channels.trading.execute.subject)
    t.notOk(executed.includes('forged'), 'trading never received it')
    // nor can it pose as trading to take its requests
    marketData.subscribe(channels.trading.execute.subject, { queue: 'trading' })
    await violation(t, 'Subscription', 'market-data', channels.trading.execute.subject)
  })

  t.test('the gateway cannot call trading, nor broadcast a key revocation (only admin can)', async (t) => {
    const gateway = await as('gateway')
    await callEndpoint(gateway, channels.trading.tokens, {}, { timeoutMs: 1000 }).catch(() => undefined)
    await violation(t, 'Publish', 'gateway', channels.trading.tokens.subject)
    publish(gateway, channels.admin.keyRevoked, { id: 'key_x', hash: 'a'.repeat(64) })
    await violation(t, 'Publish', 'gateway', channels.admin.keyRevoked.subject)
  })

  t.test('what a component does do works: calls it declares, broadcasts, its streams and buckets', async (t) => {
    const [agent, automation, admin, gateway] = await Promise.all([as('agent'), as('automation'), as('admin'), as('gateway')])
    t.same(
      await callEndpoint(agent, channels.trading.tokens, {}, { timeoutMs: 2000 }),
      { chainId: 31337, tokens: [] },
      'the agent calls trading.tokens',
    )
    const refused = await callEndpoint(automation, channels.trading.execute, swap, { timeoutMs: 2000 }).catch((e: Error) => e)
    t.match(refused, { statusCode: 409, message: 'refused by the test' }, 'automation reaches trading.execute (its 409)')
    t.ok(executed.includes('run:test'))

    const revoked: string[] = []
    subscribe(gateway, channels.admin.keyRevoked, log, ({ id }) => revoked.push(id))
    await gateway.flush()
    publish(admin, channels.admin.keyRevoked, { id: 'key_revoked', hash: 'b'.repeat(64) })
    await eventually('the gateway hears admin revoke a key', async () => (revoked.includes('key_revoked') ? true : undefined))

    // the gateway publishes charged payments into the payments stream (acked); admin's ledger consumer may pull them
    const payments = channels.admin.payments
    await ensureStream(gateway, payments.streamSpec)
    const ack = await gateway.jetstream().publish(payments.charged.subject, new TextEncoder().encode('[]'), { msgID: 'lp-1' })
    t.equal(ack.stream, payments.streamSpec.name)
    const marketData = await as('market-data')
    await t.rejects(ensureStream(marketData, payments.streamSpec), 'market-data may not touch the payments stream')

    // the gateway publishes credit debits; admin's snapshot reads the last one to wait until it is recorded
    const credit = channels.admin.credit
    await ensureStream(gateway, credit.streamSpec)
    const debit = await gateway.jetstream().publish(credit.debited.subject, new TextEncoder().encode('[]'), { msgID: 'lp-debit' })
    const adminStreams = (await admin.jetstreamManager()).streams
    const last = await adminStreams.getMessage(credit.streamSpec.name, { last_by_subj: credit.debited.subject })
    t.equal(last.seq, debit.seq, "admin reads the credit stream's last debit")
    await t.rejects(
      (await gateway.jetstreamManager()).streams.getMessage(credit.streamSpec.name, { last_by_subj: credit.debited.subject }),
      /Permissions Violation/,
      'the gateway cannot read debits back',
    )

    // admin writes the kill switch; trading reads it but cannot write it
    const control = await openBucket(admin, channels.admin.walletControl)
    await control.put('state', new TextEncoder().encode('{}'))
    const seen = await openBucket(trading, channels.admin.walletControl)
    t.equal((await seen.get('state'))?.string(), '{}')
    await t.rejects(seen.put('state', new TextEncoder().encode('{"paused":true}')), 'trading cannot pause the wallet')
  })
})

t.test('Postgres: each role owns its own schema and cannot read another', async (t) => {
  const { databaseUrl: superuser } = await testInfra()
  const url = await freshDatabase(t)
  const prefix = `lp${randomBytes(4).toString('hex')}`
  const roles = [
    { role: databaseRoleOf('trading', prefix), schema: 'trading', password: secret() },
    { role: databaseRoleOf('market-data', prefix), schema: 'market_data', password: secret() },
  ]
  t.teardown(async () => {
    const client = new pg.Client({ connectionString: superuser })
    await client.connect()
    await client.query(`DROP DATABASE IF EXISTS ${new URL(url).pathname.slice(1)} WITH (FORCE)`)
    for (const { role } of roles) await client.query(`DROP ROLE IF EXISTS ${role}`)
    await client.end()
  })
  const fixtures = fileURLToPath(new URL('./fixtures/migrations/', import.meta.url))
  // an earlier run as the superuser made trading's schema and its first migration (the old way)
  const first = await mkdtemp(join(tmpdir(), 'ats-lp-'))
  t.teardown(() => rm(first, { recursive: true, force: true }))
  await cp(join(fixtures, '20260101000000_init'), join(first, '20260101000000_init'), { recursive: true })
  await migrate(url, { schema: 'trading', dir: first })

  await ensureRoles(url, roles)
  await ensureRoles(url, roles) // again: nothing to do, no error
  const [tradingUrl, marketUrl] = roles.map((r) => roleUrl(url, r.role, r.password))
  // each migrates its own schema as itself: trading's second migration alters a table the superuser made
  t.same((await migrate(tradingUrl!, { schema: 'trading', dir: fixtures })).applied, ['20260102000000_more'])
  t.same((await migrate(marketUrl!, { schema: 'market_data', dir: fixtures })).applied, ['20260101000000_init', '20260102000000_more'])

  const connectAs = async (connectionString: string) => {
    const client = new pg.Client({ connectionString })
    await client.connect()
    t.teardown(() => client.end())
    return client
  }
  const tradingDb = await connectAs(tradingUrl!)
  const marketDb = await connectAs(marketUrl!)
  t.equal((await tradingDb.query('SELECT current_user')).rows[0].current_user, roles[0]!.role)
  await tradingDb.query(`INSERT INTO trading.widgets (id, color, label) VALUES ('w1', 'red', 'mine')`)
  t.equal((await tradingDb.query('SELECT label FROM trading.widgets')).rows[0].label, 'mine')

  await t.rejects(marketDb.query('SELECT * FROM trading.widgets'), /permission denied for schema trading/)
  await t.rejects(marketDb.query(`INSERT INTO trading.widgets (id, color) VALUES ('w2', 'blue')`), /permission denied for schema trading/)
  await t.rejects(tradingDb.query('SELECT * FROM market_data.widgets'), /permission denied for schema market_data/)
  await t.rejects(marketDb.query('CREATE SCHEMA elsewhere'), /permission denied for database/)
  await t.rejects(marketDb.query('CREATE TABLE public.spill (x int)'), /permission denied for schema public/)
  await t.rejects(marketDb.query(`ALTER SCHEMA trading OWNER TO ${roles[1]!.role}`), /must be owner/)
})
