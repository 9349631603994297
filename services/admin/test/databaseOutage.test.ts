import { once } from 'node:events'
import { createServer, type Server, type Socket, connect } from 'node:net'
import { callEndpoint, ServiceCallError } from '@ats/service-kit'
import { baseTestEnv, eventually, startService } from '@ats/service-kit/testing'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { adminService } from '../src/service.ts'
import { freshAddress, internalCall, signCharge, startAdmin } from './helpers.ts'

/**
 * A TCP relay to the real Postgres, on a port of its own: closing it (and every connection
 * through it) is Postgres going away, as in a restart or failover, without stopping the
 * machine's Postgres; opening it again on the same port is Postgres back.
 */
async function startRelay(target: URL) {
  const sockets = new Set<Socket>()
  let server: Server | undefined
  let port = 0
  async function open() {
    server = createServer((client) => {
      const upstream = connect(Number(target.port || 5432), target.hostname)
      for (const socket of [client, upstream]) {
        sockets.add(socket)
        socket.on('close', () => sockets.delete(socket))
        socket.on('error', () => socket.destroy())
      }
      client.pipe(upstream).pipe(client)
    })
    server.listen(port, '127.0.0.1')
    await once(server, 'listening')
    port = (server.address() as { port: number }).port
  }
  async function close() {
    const closed = new Promise((resolve) => server!.close(resolve))
    for (const socket of sockets) socket.destroy()
    await closed
  }
  await open()
  t.teardown(close)
  return { port: () => port, open, close }
}

/** the test's environment, and a relay to its Postgres: DATABASE_URL through it is `viaRelay` */
async function relayedEnv(t: Parameters<typeof baseTestEnv>[0]) {
  const env = await baseTestEnv(t)
  const direct = new URL(env.DATABASE_URL!)
  const relay = await startRelay(direct)
  const viaRelay = new URL(direct)
  viaRelay.host = `127.0.0.1:${relay.port()}`
  return { env, relay, viaRelay }
}

t.test('Postgres going away: requests answer 503 (retryable), over HTTP and NATS; back, admin serves again by itself', async (t) => {
  const { env, relay, viaRelay } = await relayedEnv(t)
  const admin = await startService(t, adminService, {
    ...env,
    DATABASE_URL: viaRelay.toString(),
    ADMIN_API_KEY: 'atsk_outage-test-bootstrap-key-000000',
    SETTLEMENT_ENABLED: 'false',
  })
  const call = internalCall(admin.url)
  const created = await call('POST', '/admin/keys', { tier: 'readwrite', label: 'before' })
  t.equal(created.status, 201)
  const { keyPolicy } = admin.ctx.channels.admin

  await relay.close()
  const listed = await call('GET', '/admin/keys')
  t.equal(listed.status, 503, 'a 503, not a 500')
  t.same(listed.body, { error: 'the database is unavailable for a moment (restarting or failing over); try again' })
  const overNats = await callEndpoint(admin.ctx.nc, keyPolicy, { keyId: `${created.body.id}-x` }, { timeoutMs: 10_000 }).catch(
    (error: unknown) => error,
  )
  t.ok(overNats instanceof ServiceCallError, 'over NATS too')
  t.match(overNats, { statusCode: 503, message: /the database is unavailable for a moment/ }, 'a 503, which callers retry')

  await relay.open()
  const back = await eventually('admin to serve again', async () => {
    const res = await call('GET', '/admin/keys')
    return res.status === 200 ? res : undefined
  })
  t.ok(
    back.body.keys.some((k: { id: string }) => k.id === created.body.id),
    'what it recorded before is there',
  )
  t.equal((await call('POST', '/admin/keys', { tier: 'readonly', label: 'after' })).status, 201, 'and it records again')
})

t.test('charges published while Postgres is away wait for it, however many tries that takes: none goes to the dead letters', async (t) => {
  const { env, relay, viaRelay } = await relayedEnv(t)
  // a failed batch is tried again every 100 ms: the 3 tries after which a bad batch is dead-lettered pass in 0.3 s
  const admin = await startAdmin(
    t,
    {},
    { env: { ...env, DATABASE_URL: viaRelay.toString(), SETTLEMENT_ENABLED: 'false', LEDGER_RETRY_MS: '100' } },
  )
  const { stream, deadLetters, ledgerConsumer } = admin.payments
  const payer = privateKeyToAccount(generatePrivateKey())
  const charges = await Promise.all([1, 2, 3].map(() => signCharge(freshAddress(), payer)))

  await relay.close()
  for (const charge of charges) await admin.publish([charge])
  // far more tries than maxDeliveries while the database is away
  await sleep(2_000)
  const tried = await admin.jsm.consumers.info(stream, ledgerConsumer)
  t.ok(tried.num_redelivered > 0 || tried.num_ack_pending > 0, 'the charges were tried while the database was away')
  const dead = await admin.jsm.streams.getMessage(stream, { last_by_subj: deadLetters }).catch(() => undefined)
  t.equal(dead, undefined, 'none went to the dead letters')

  await relay.open()
  const recorded = await admin.paymentsWhen('the charges recorded once Postgres is back', (payments) => payments.length === 3, 30_000)
  t.same(recorded.map((p) => p.requestId).sort(), charges.map((c) => c.requestId).sort(), 'each charge recorded, once')
  const drained = await eventually('the ledger consumer drained', async () => {
    const info = await admin.jsm.consumers.info(stream, ledgerConsumer)
    return info.num_pending === 0 && info.num_ack_pending === 0 ? info : undefined
  })
  t.match(drained, { num_pending: 0, num_ack_pending: 0 }, 'nothing is left waiting')
})
