/**
 * The rolling-upgrade checks (src/release/): the tree is compatible with the committed release
 * snapshot (what `pnpm contracts:check` runs, so pnpm test fails on a break); changes an older
 * replica breaks on are reported, naming the endpoint or route, the field and why, and additive
 * ones are not; a migration dropping or renaming a column or table the release still has is
 * refused, one adding a column passes; the images are tagged with the fleet's version; a release
 * sets the version everywhere and writes its snapshot.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { compareContracts } from '../src/release/compat.ts'
import type { JsonSchema, ServiceContracts } from '../src/release/contracts.ts'
import { checkMigrations, readColumns, tableChanges } from '../src/release/database.ts'
import { imageTagProblems, setImageTags } from '../src/release/imageTags.ts'
import {
  checkAgainstRelease,
  type ContractsSnapshot,
  columnsFile,
  contractsFile,
  cutRelease,
  fleetVersion,
  packageFiles,
} from '../src/release/release.ts'
import { schemaChanges } from '../src/release/schemaDiff.ts'

const repo = fileURLToPath(new URL('../../..', import.meta.url))
const released = JSON.parse(readFileSync(join(repo, contractsFile), 'utf8')) as ContractsSnapshot

type Obj = Record<string, any>

/** A copy of the release's contracts, changed by `edit`, and what the check says of it. */
function problemsAfter(edit: (services: Record<string, ServiceContracts>) => void): string[] {
  const current = structuredClone(released.services)
  edit(current)
  return compareContracts(released.services, current)
}

const endpoint = (services: Record<string, ServiceContracts>, subject: string) => {
  const found = Object.values(services)
    .flatMap((s) => s.endpoints)
    .find((e) => e.subject === subject)
  if (!found) throw new Error(`no endpoint ${subject} in the snapshot`)
  return found
}
const route = (services: Record<string, ServiceContracts>, method: string, url: string) => {
  const found = Object.values(services)
    .flatMap((s) => s.routes)
    .find((r) => r.method === method && r.url === url)
  if (!found) throw new Error(`no route ${method} ${url} in the snapshot`)
  return found
}

t.test('the tree is compatible with the committed release snapshot (pnpm contracts:check)', async (t) => {
  const { version, problems } = await checkAgainstRelease(repo)
  t.equal(version, released.version)
  t.same(problems, [], 'no change a replica of the release breaks on')
  t.equal(released.version, fleetVersion(repo), 'the snapshot is of the fleet version')
  const services = Object.keys(released.services)
  t.ok(
    ['gateway', 'admin', 'agent', 'trading', 'market', 'automation'].every((s) => services.includes(s)),
    `every service: ${services.join(', ')}`,
  )
  const all = Object.values(released.services)
  t.ok(all.flatMap((s) => s.endpoints).length >= 25, 'NATS endpoints with their schemas')
  t.ok(
    all.flatMap((s) => s.messages).some((m) => m.subject === 'ats.events.>'),
    'stream messages (the events stream)',
  )
  t.ok(all.flatMap((s) => s.routes).length >= 60, 'HTTP routes')
  const agentPayer = endpoint(released.services, 'ats.admin.agent-payers.get')
  t.same(agentPayer.request.required, ['address'], 'an endpoint whose schema is written inline is read too')
})

t.test('breaking changes are reported, naming where and why', async (t) => {
  const removed = problemsAfter((s) => {
    const reply = endpoint(s, 'ats.admin.keys.verify').response as Obj
    delete reply.properties.key
    reply.required = []
  })
  t.match(removed, [
    /admin NATS endpoint keyVerify \(ats\.admin\.keys\.verify\) reply \.key: removed \(was required\) \(readers of the release/,
  ])

  const required = problemsAfter((s) => {
    const request = endpoint(s, 'ats.trading.positions').request as Obj
    request.required = ['address']
  })
  t.match(required, [
    /trading NATS endpoint positions \(ats\.trading\.positions\) request \.address: made required \(senders of the release/,
  ])

  const addedRequired = problemsAfter((s) => {
    const request = endpoint(s, 'ats.admin.keys.policy').request as Obj
    request.properties.reason = { type: 'string' }
    request.required.push('reason')
  })
  t.match(addedRequired, [/keys\.policy\) request \.reason: added as required/])

  const narrowed = problemsAfter((s) => {
    ;(endpoint(s, 'ats.admin.keys.policy').request as Obj).properties.keyId.maxLength = 32
  })
  t.match(narrowed, [/keys\.policy\) request \.keyId: maxLength 64 became 32/])

  const renamed = problemsAfter((s) => {
    endpoint(s, 'ats.trading.swap.quote').subject = 'ats.trading.swap.quote.v2'
  })
  t.match(renamed, [/trading NATS endpoint quote \(ats\.trading\.swap\.quote\): subject removed or renamed/])

  const message = problemsAfter((s) => {
    const events = Object.values(s)
      .flatMap((x) => x.messages)
      .find((m) => m.subject === 'ats.events.>')!
    ;(events.message as Obj).properties.type.enum.push('job.paused')
  })
  t.match(message, [
    /NATS message events\.all \(ats\.events\.>\) message \.type: values added: "job\.paused" \(readers of the release refuse/,
  ])

  const routeRenamed = problemsAfter((s) => {
    route(s, 'GET', '/swap/quote').url = '/swap/quotes'
  })
  t.match(routeRenamed, [/route GET \/swap\/quote: removed or renamed/])

  const responseOptional = problemsAfter((s) => {
    const answer = route(s, 'GET', '/swap/quote').response['200'] as Obj
    answer.required = answer.required.slice(1)
  })
  t.match(responseOptional, [/route GET \/swap\/quote response 200 \.\w+: made optional/])

  const stream = problemsAfter((s) => {
    const payments = Object.values(s)
      .flatMap((x) => x.streams)
      .find((x) => x.name === 'ats_payments')!
    payments.subjects = payments.subjects.filter((x) => x !== 'ats.payments.job-outcome')
  })
  t.match(stream, [/stream ats_payments: no longer holds subject ats\.payments\.job-outcome/])
})

t.test('additive changes pass', async (t) => {
  const problems = problemsAfter((s) => {
    const quote = endpoint(s, 'ats.trading.swap.quote')
    // a new optional field in a request and in a (non-strict) reply
    ;(quote.request as Obj).properties.note = { type: 'string' }
    ;(quote.response as Obj).properties.note = { type: 'string' }
    // versioned: the new subject beside the old one
    s.trading!.endpoints.push({ ...structuredClone(quote), name: 'quoteV2', subject: 'ats.trading.swap.quote.v2' })
    const newRoute = structuredClone(route(s, 'GET', '/swap/quote'))
    s.trading!.routes.push({ ...newRoute, url: '/v2/swap/quote' })
    // a request widened: a bound relaxed
    ;(endpoint(s, 'ats.admin.keys.policy').request as Obj).properties.keyId.maxLength = 128
    // annotations are not changes
    ;(endpoint(s, 'ats.admin.keys.verify').response as Obj).description = 'reworded'
  })
  t.same(problems, [])
})

t.test('the schema rules, one by one', async (t) => {
  const str = { type: 'string' }
  const obj = (properties: Obj, required: string[] = [], extra: Obj = {}): JsonSchema => ({
    type: 'object',
    properties,
    required,
    ...extra,
  })
  const one = (before: JsonSchema, after: JsonSchema) =>
    schemaChanges(before, after).map((c) => ({ path: c.path, what: c.what, narrows: c.narrows, widens: c.widens }))

  t.match(one({ type: 'number' }, { type: 'integer' }), [{ what: 'integer where number was', narrows: true, widens: false }])
  t.match(one({ ...str, enum: ['a', 'b'] }, { ...str, enum: ['a'] }), [{ what: 'values removed: "b"', narrows: true }])
  t.match(one({ ...str, pattern: '^a$' }, { ...str, pattern: '^b$' }), [{ what: /pattern changed/, narrows: true, widens: true }])
  t.match(one({ anyOf: [{ const: 'a' }, { const: 'b' }] }, { anyOf: [{ const: 'a' }, { const: 'b' }, { const: 'c' }] }), [
    { what: 'values added: "c"', narrows: false, widens: true },
  ])
  t.match(one(obj({ a: str }), obj({ a: { anyOf: [str, { type: 'null' }] } })), [
    { path: '.a', what: 'alternative null added', widens: true },
  ])
  t.match(one(obj({ a: str, b: str }, [], { additionalProperties: false }), obj({ a: str }, [], { additionalProperties: false })), [
    { path: '.b', what: /removed \(the object is strict/, narrows: true },
  ])
  t.match(one(obj({ a: str }, [], { additionalProperties: false }), obj({ a: str, b: str }, [], { additionalProperties: false })), [
    { path: '.b', what: /added to a strict object/, narrows: false, widens: true },
  ])
  t.same(one(obj({ a: str }), obj({ a: str, b: str })), [], 'an optional property added to an object that is not strict')
  t.match(
    one(
      obj({ list: { type: 'array', items: obj({ n: { type: 'integer', minimum: 0 } }, ['n']) } }),
      obj({ list: { type: 'array', items: obj({ n: { type: 'integer', minimum: 1 } }, ['n']) } }),
    ),
    [{ path: '.list[].n', what: 'minimum 0 became 1', narrows: true }],
  )
  t.match(one(str, obj({})), [{ what: 'type string became object', narrows: true, widens: true }])
})

/** A root holding a copy of every service's prisma/ folder, for migrations written by the test. */
function databaseCopy(t: Test): string {
  const root = mkdtempSync(join(tmpdir(), 'ats-release-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  for (const service of Object.keys(readColumns(repo))) {
    cpSync(join(repo, 'services', service, 'prisma'), join(root, 'services', service, 'prisma'), { recursive: true })
  }
  return root
}

const addMigration = (root: string, service: string, name: string, sql: string) => {
  mkdirSync(join(root, 'services', service, 'prisma', 'migrations', name), { recursive: true })
  writeFileSync(join(root, 'services', service, 'prisma', 'migrations', name, 'migration.sql'), sql)
}

t.test('migrations newer than the release may not drop or rename what it still has', async (t) => {
  const root = databaseCopy(t)
  const release = readColumns(root)
  t.ok(release.admin!.tables.api_keys!.includes('wallet'))
  t.ok(release['market-data']!.tables.prediction_markets!.includes('search'), 'a column only the SQL creates (not in schema.prisma)')
  t.same(checkMigrations(root, release), [], 'the release itself')

  addMigration(
    root,
    'admin',
    '29990101000000_key_note',
    'ALTER TABLE "api_keys" ADD COLUMN "note" TEXT;\nCREATE INDEX "api_keys_note_idx" ON "api_keys"("note");',
  )
  t.same(checkMigrations(root, release), [], 'adding a column passes')
  t.ok(readColumns(root).admin!.tables.api_keys!.includes('note'), 'and the next snapshot has it')

  addMigration(
    root,
    'admin',
    '29990102000000_drop_wallet',
    '-- the wallet moved to agent_payers\nALTER TABLE "api_keys" DROP COLUMN "wallet";',
  )
  const problems = checkMigrations(root, release)
  t.equal(problems.length, 1)
  t.match(problems[0], /^admin migration 29990102000000_drop_wallet drops column api_keys\.wallet, which the release still has/)
  t.match(
    problems[0],
    /expand\/contract: drop it in the release after the one that stopped reading it; to drop it now, remove it from release\/columns\.json/i,
  )

  addMigration(
    root,
    'trading',
    '29990103000000_renames',
    'ALTER TABLE trading."approvals" RENAME COLUMN "reason" TO "why";\nALTER TABLE "launches" RENAME TO "token_launches";\nDROP TABLE IF EXISTS "executions" CASCADE;',
  )
  const trading = checkMigrations(root, release).filter((p) => p.startsWith('trading'))
  t.match(trading, [/renames to why column approvals\.reason/, /renames to token_launches table launches/, /drops table executions/])

  // a column added after the release may be dropped again: no replica of the release uses it
  addMigration(root, 'admin', '29990104000000_drop_note', 'ALTER TABLE "api_keys" DROP COLUMN IF EXISTS "note";')
  t.equal(checkMigrations(root, release).filter((p) => p.includes('note')).length, 0)
})

t.test('the SQL reader: what drops or renames, and what does not', async (t) => {
  t.same(
    tableChanges(
      'ALTER TABLE "a" DROP CONSTRAINT "a_pkey", ALTER COLUMN "b" DROP DEFAULT, ALTER COLUMN "c" DROP NOT NULL; ALTER TABLE "a" RENAME CONSTRAINT "x" TO "y";',
    ),
    [],
  )
  t.same(tableChanges('ALTER TABLE "a" ADD CONSTRAINT "u" UNIQUE ("b"), ADD COLUMN IF NOT EXISTS "c" INT, DROP "d";'), [
    { kind: 'add', table: 'a', column: 'c' },
    { kind: 'drop', table: 'a', column: 'd' },
  ])
  t.same(tableChanges('CREATE TABLE "t" ("id" TEXT NOT NULL, "n" NUMERIC(78, 0), CONSTRAINT "t_pkey" PRIMARY KEY ("id"));'), [
    { kind: 'create', table: 't', columns: ['id', 'n'] },
  ])
})

t.test('the images are tagged with the fleet version, and a release sets them', async (t) => {
  const version = fleetVersion(repo)
  t.same(imageTagProblems(repo, version), [])
  const root = mkdtempSync(join(tmpdir(), 'ats-tags-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  cpSync(join(repo, 'docker-compose.yml'), join(root, 'docker-compose.yml'))
  cpSync(join(repo, 'k8s'), join(root, 'k8s'), { recursive: true })
  t.match(imageTagProblems(root, '9.9.9'), [/docker-compose\.yml: ats-\S+ is tagged \S+, not the fleet's version 9\.9\.9/])
  const prod = join(root, 'k8s/overlays/prod/kustomization.yaml')
  writeFileSync(prod, readFileSync(prod, 'utf8').replace(/(newName: \S+ats-gateway)\n/, '$1\n    newTag: "0.9.0"\n'))
  setImageTags(root, '9.9.9')
  t.same(imageTagProblems(root, '9.9.9'), [
    "k8s/overlays/prod/kustomization.yaml: ats-gateway sets newTag 0.9.0; the tag is the fleet's version, set in k8s/base/kustomization.yaml",
  ])
  t.match(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), /image: ats-gateway:9\.9\.9\n/)
})

t.test('a release: every package.json, the image tags, a CHANGELOG section and the snapshot', async (t) => {
  const root = databaseCopy(t)
  const files = [...packageFiles(repo), 'pnpm-workspace.yaml', 'docker-compose.yml', 'k8s', 'CHANGELOG.md', contractsFile, columnsFile]
  for (const file of files) cpSync(join(repo, file), join(root, file), { recursive: true })
  await t.rejects(cutRelease(root, 'next'), /next is not a version/)
  const written = await cutRelease(root, '1.1.0')
  t.ok(written.includes('services/trading/package.json') && written.includes('e2e/package.json'))
  for (const file of packageFiles(root)) t.equal(JSON.parse(readFileSync(join(root, file), 'utf8')).version, '1.1.0', file)
  t.same(imageTagProblems(root, '1.1.0'), [])
  const changelog = readFileSync(join(root, 'CHANGELOG.md'), 'utf8')
  // the notes written as changes landed are the release's
  const unreleased = /^## Unreleased\n([\s\S]*?)\n## /m.exec(readFileSync(join(repo, 'CHANGELOG.md'), 'utf8'))?.[1]
  if (unreleased)
    t.ok(changelog.startsWith(`# Changelog\n\n## 1.1.0 (`) && changelog.includes(unreleased) && !changelog.includes('## Unreleased'))
  else t.match(changelog, /^# Changelog\n\n## 1\.1\.0 \(\d{4}-\d\d-\d\d\)\n\n### Added\n[\s\S]*\n## 1\.0\.0 /)
  t.equal(JSON.parse(readFileSync(join(root, contractsFile), 'utf8')).version, '1.1.0')
  t.equal(JSON.parse(readFileSync(join(root, columnsFile), 'utf8')).version, '1.1.0')
  // without notes written down, a section to fill in
  writeFileSync(join(root, 'CHANGELOG.md'), '# Changelog\n\n## 1.1.0 (2026-12-01)\n\nnotes\n')
  await cutRelease(root, '1.2.0')
  t.match(
    readFileSync(join(root, 'CHANGELOG.md'), 'utf8'),
    /^# Changelog\n\n## 1\.2\.0 \(\d{4}-\d\d-\d\d\)\n\n### Added\n[\s\S]*\n## 1\.1\.0 \(2026-12-01\)\n\nnotes\n$/,
  )
})
