import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { backup, restore } from '@ats/fleet/backup'
import { freshDatabase } from '@ats/service-kit/testing'
import t from 'tap'
import { adminKey, eventually, startAgentFleet } from './fleet.ts'

/**
 * A backup taken from a running fleet (pnpm db:backup's code), restored into an empty database
 * (pnpm db:restore's), and a new fleet on that database serving what the first one recorded:
 * the API key authenticates and the admin lists it, the payer's finished job answers with its result.
 */
t.test('a backup of a running fleet restores into an empty database, and a fleet on it serves its keys and jobs', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'ats-backup-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))

  // every service with a schema runs (automation too)
  const first = await startAgentFleet(t, { automationEnv: {} })
  const made = await first.request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label: 'kept' } })
  t.equal(made.status, 201)
  const { key, id: keyId } = made.body as { key: string; id: string }
  // a paid job (devnet account 1 pays): the job is the payer's
  type Fleet = typeof first
  const paid = async (fleet: Fleet, path: string, init: { method?: string; body?: unknown } = {}) =>
    fleet.request(path, { ...init, headers: { 'x-payment': await fleet.pay() } })
  const asked = await paid(first, '/agent/prompt', { method: 'POST', body: { prompt: 'What is the price of ARB?' } })
  t.equal(asked.status, 202, JSON.stringify(asked.body))
  const { jobId } = asked.body as { jobId: string }
  const done = await eventually('the job to finish', async () => {
    const job = (await paid(first, `/agent/job/${jobId}`)).body
    return job.status === 'complete' ? job : undefined
  })

  // taken while the fleet runs
  const manifest = await backup(first.gatewayEnv.DATABASE_URL!, dir)
  t.same(manifest.schemas.map((s) => s.schema).sort(), ['admin', 'agent', 'automation', 'market_data', 'trading'])
  t.ok(
    manifest.schemas.every((s) => s.migrations.length > 0),
    'each schema with its migrations',
  )

  const empty = await freshDatabase(t)
  const restored = await restore(dir, empty)
  t.equal(restored.length, 5)
  await t.rejects(restore(dir, empty), /already has schema admin, agent, automation, market_data, trading: restore into an empty database/)

  // a new fleet (its own devnet, NATS namespace and processes) on the restored database
  const second = await startAgentFleet(t, { databaseUrl: empty, automationEnv: {} })
  t.equal((await second.request('/market/prices', { key })).status, 200, 'the key authenticates on the restored fleet')
  const keys = await second.request('/admin/keys', { key: adminKey })
  t.ok(
    (keys.body.keys as Array<{ id: string }>).some((k) => k.id === keyId),
    'the admin lists the key',
  )
  const job = await paid(second, `/agent/job/${jobId}`)
  t.equal(job.status, 200)
  t.match(job.body, { status: 'complete', result: { text: done.result.text } }, 'the payer reads its finished job')
  const again = await paid(second, '/agent/prompt', { method: 'POST', body: { prompt: 'What is the price of GMX?' } })
  t.equal(again.status, 202, 'and it takes new work')
})
