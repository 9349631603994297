import { fileURLToPath } from 'node:url'
import { identityHeaders } from '@ats/contracts'
import { createService } from '@ats/service-kit'
import { baseTestEnv, compareSchemaWithDatabase, startService, testInternalToken } from '@ats/service-kit/testing'
import t, { type Test } from 'tap'
import { agentService } from '../src/service.ts'
import { builtInSkills } from '../src/skills.ts'

async function start(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), ...extra }
  const svc = await startService(t, agentService, env)
  const call = async (path: string, headers: Record<string, string> = { [identityHeaders.internalToken]: testInternalToken }) => {
    const res = await fetch(`${svc.url}${path}`, { headers })
    return { status: res.status, body: (await res.json()) as any }
  }
  return { svc, env, call }
}

const builtIns = [
  ['swap-quote', '/swap/quote'],
  ['swap-execute', '/swap/execute'],
  ['portfolio-positions', '/portfolio/positions'],
  ['market-prices', '/market/prices'],
  ['trending-pools', '/market/trending'],
  ['nfts', '/nfts/:address'],
  ['predictions', '/predictions/top'],
  ['bridge-quote', '/bridge/quote'],
  ['automations', '/automations'],
]

t.test('skills: the built-in ones (relative paths by default), then those of EXTERNAL_SKILLS', async (t) => {
  const external = [
    { name: 'weather', url: 'https://skills.example.com/weather' },
    { name: 'news', url: 'http://news.internal:8080/latest' },
  ]
  const { call } = await start(t, { EXTERNAL_SKILLS: JSON.stringify(external) })
  const res = await call('/agent/skills')
  t.equal(res.status, 200)
  t.same(res.body, {
    skills: [
      ...builtIns.map(([name, url]) => ({ name, url, external: false })),
      ...external.map((s) => ({ ...s, external: true })),
    ],
  })
  t.equal(builtInSkills.length, builtIns.length)
})

t.test('without EXTERNAL_SKILLS (or with it empty) only built-in skills; AGENT_PUBLIC_URL prefixes their paths', async (t) => {
  const { call } = await start(t, { EXTERNAL_SKILLS: '', AGENT_PUBLIC_URL: 'https://api.example.com/' })
  const res = await call('/agent/skills')
  t.equal(res.status, 200)
  t.same(
    res.body.skills,
    builtIns.map(([name, url]) => ({ name, url: `https://api.example.com${url}`, external: false })),
  )
  const empty = await start(t, { EXTERNAL_SKILLS: '[]' })
  t.equal((await empty.call('/agent/skills')).body.skills.length, builtIns.length)
})

t.test('a malformed EXTERNAL_SKILLS stops the start with a message naming it', async (t) => {
  const env = await baseTestEnv(t)
  const cases: Array<[string, RegExp]> = [
    ['not json', /not JSON/],
    ['{"name":"x","url":"https://x.example"}', /JSON array/],
    ['[{"name":"x"}]', /\/0.*url/],
    ['[{"name":"","url":"https://x.example"}]', /\/0\/name/],
    ['[{"name":"x","url":"ftp://x.example"}]', /\/0\/url must be an absolute http\(s\) URL/],
    ['[{"name":"x","url":"https://a.example"},{"name":"x","url":"https://b.example"}]', /"x" is used twice/],
    ['[{"name":"swap-quote","url":"https://a.example"}]', /"swap-quote" is used twice/],
  ]
  for (const [value, detail] of cases) {
    const error = await createService(agentService, { ...env, EXTERNAL_SKILLS: value }).then(
      () => undefined,
      (e: Error) => e,
    )
    t.equal(error?.name, 'StartupError', value)
    t.match(error?.message, /^invalid setting EXTERNAL_SKILLS: must be a JSON array of \{"name", "url"\} objects/, value)
    t.match(error?.message, detail, value)
  }
  await t.rejects(createService(agentService, { ...env, AGENT_PUBLIC_URL: 'api.example.com' }), {
    name: 'StartupError',
    message: /invalid setting AGENT_PUBLIC_URL: must be an absolute http\(s\) URL/,
  })
})

t.test('requests without the internal token answer 401; probes need none', async (t) => {
  const { call } = await start(t)
  const refused: Array<Record<string, string>> = [{}, { [identityHeaders.internalToken]: 'wrong-token-0123456789' }]
  for (const headers of refused) {
    const res = await call('/agent/skills', headers)
    t.equal(res.status, 401)
    t.match(res.body, { error: String })
  }
  t.equal((await call('/health', {})).status, 200)
  t.equal((await call('/ready', {})).status, 200)
})

t.test('threads, messages and jobs round-trip through the generated client', async (t) => {
  const { svc } = await start(t)
  const db = svc.ctx.db
  const thread = await db.thread.create({ data: { id: 'thr_1', ownerId: '0xabc' } })
  await db.message.create({ data: { id: 'msg_1', threadId: thread.id, role: 'user', content: 'hello' } })
  await db.job.create({ data: { id: 'job_1', ownerId: '0xabc', threadId: thread.id, prompt: 'hello' } })
  const loaded = await db.thread.findUniqueOrThrow({ where: { id: 'thr_1' }, include: { messages: true, jobs: true } })
  t.match(loaded.messages, [{ role: 'user', content: 'hello', metadata: null }])
  t.same(loaded.messages[0]?.toolCalls, [], 'toolCalls default to an empty list')
  t.match(loaded.jobs, [{ status: 'pending', prompt: 'hello', result: null, error: null }])
  await db.thread.delete({ where: { id: 'thr_1' } })
  t.equal(await db.job.count(), 0, 'jobs and messages go with their thread')
})

t.test('schema.prisma and the migrated database agree', async (t) => {
  const { env } = await start(t)
  const schema = fileURLToPath(new URL('../prisma/schema.prisma', import.meta.url))
  t.same(await compareSchemaWithDatabase(schema, env.DATABASE_URL!, 'agent'), [])
})
