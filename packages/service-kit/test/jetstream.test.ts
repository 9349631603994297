import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { connect, type NatsConnection } from 'nats'
import t from 'tap'
import { ensureStream, StartupError } from '../src/index.ts'
import { freshNamespace, testInfra } from '../src/testing.ts'

const spec = (name: string) => ({ name, subjects: [`test.${name}.>`], maxAgeMs: 60_000, duplicateWindowMs: 10_000 })

t.test('ensureStream creates a stream, and brings an existing one to its spec', async (t) => {
  const { natsUrl } = await testInfra()
  const nc = await connect({ servers: natsUrl })
  t.teardown(() => nc.close())
  const name = `${await freshNamespace(t)}_payments`
  const jsm = await ensureStream(nc, spec(name))
  t.same((await jsm.streams.info(name)).config.subjects, [`test.${name}.>`])
  await ensureStream(nc, { ...spec(name), maxAgeMs: 120_000 })
  t.equal((await jsm.streams.info(name)).config.max_age, 120_000 * 1_000_000, 'updated in place')
})

const natsServer = '/usr/sbin/nats-server'
t.test('a NATS without JetStream is a start-up error that says so', { skip: !existsSync(natsServer) && 'no nats-server binary here' }, async (t) => {
  const port = 4300 + Math.floor(Math.random() * 500)
  const server = spawn(natsServer, ['-a', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' })
  t.teardown(() => void server.kill())
  let nc: NatsConnection | undefined
  for (let i = 0; i < 50 && !nc; i++) {
    nc = await connect({ servers: `nats://127.0.0.1:${port}` }).catch(() => undefined)
    if (!nc) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  if (!nc) throw new Error('nats-server without JetStream did not start')
  t.teardown(() => nc.close())
  const error = await ensureStream(nc, spec('NOJS')).then(
    () => undefined,
    (e: Error) => e,
  )
  t.type(error, StartupError)
  t.match(error?.message, /^NATS has no JetStream .*start nats-server with -js$/)
})
