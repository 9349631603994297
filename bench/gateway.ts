import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'
import autocannon from 'autocannon'

/**
 * pnpm bench: requests/s and p99 of a keyed route through the gateway (auth with
 * the key cache, Redis rate limit, identity headers, logging, metrics) next to
 * the same route through a bare @fastify/http-proxy, in one run on this machine.
 * Every server is its own process; autocannon runs in this one.
 */
const root = fileURLToPath(new URL('..', import.meta.url))
const duration = Number(process.env.BENCH_SECONDS ?? 10)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 50)
const rounds = Number(process.env.BENCH_ROUNDS ?? 2)

const children: ChildProcess[] = []
process.on('exit', () => children.forEach((c) => c.kill('SIGTERM')))

function start(script: string, env: NodeJS.ProcessEnv, printsAddress: boolean): Promise<string | undefined> {
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', printsAddress ? 'pipe' : 'ignore', 'pipe'],
  })
  children.push(child)
  let errors = ''
  child.stderr!.on('data', (d) => (errors += d))
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`${script} exited ${code}: ${errors}`)))
    if (!printsAddress) return resolve(undefined)
    createInterface({ input: child.stdout! }).once('line', (line) => resolve(line.trim()))
  })
}

async function ready(url: string) {
  for (let i = 0; i < 240; i++) {
    try {
      if ((await fetch(`${url}/ready`)).ok) return
    } catch {}
    await new Promise((r) => setTimeout(r, 250))
  }
  throw new Error(`${url} never became ready`)
}

async function load(url: string, key?: string) {
  const result = await autocannon({
    url,
    connections,
    duration,
    headers: key ? { authorization: `Bearer ${key}` } : {},
  })
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx answers, ${result.errors} errors`)
  return { rps: result.requests.average, p99: result.latency.p99 }
}

const env = {
  DATABASE_URL: process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres',
  NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  INTERNAL_TOKEN: randomBytes(18).toString('base64url'),
  ADMIN_API_KEY: `atsk_${randomBytes(24).toString('base64url')}`,
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
}
const upstream = (await start('bench/upstream.ts', {}, true))!
const bare = (await start('bench/bareProxy.ts', { UPSTREAM: upstream, PORT: '3901' }, true))!
await start('services/admin/src/server.ts', { ...env, PORT: '3905', HOST: '127.0.0.1' }, false)
await ready('http://127.0.0.1:3905')
await start(
  'gateway/src/server.ts',
  { ...env, NODE_OPTIONS: process.env.GATEWAY_NODE_OPTIONS ?? '', PORT: '3900', HOST: '127.0.0.1', ADMIN_URL: 'http://127.0.0.1:3905', MARKET_DATA_URL: upstream, RATE_LIMIT_READONLY: '1000000000' },
  false,
)
const gateway = 'http://127.0.0.1:3900'
await ready(gateway)

const created = await fetch(`${gateway}/admin/keys`, {
  method: 'POST',
  headers: { authorization: `Bearer ${env.ADMIN_API_KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ tier: 'readonly', label: 'bench' }),
})
const { key } = (await created.json()) as { key: string }

console.log(`warming up; then ${rounds} rounds of ${duration} s each, ${connections} connections, GET /market/prices`)
await load(`${bare}/market/prices`)
await load(`${gateway}/market/prices`, key)
const runs = { bare: [] as Array<{ rps: number; p99: number }>, keyed: [] as Array<{ rps: number; p99: number }> }
for (let i = 0; i < rounds; i++) {
  runs.bare.push(await load(`${bare}/market/prices`))
  runs.keyed.push(await load(`${gateway}/market/prices`, key))
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
const row = (name: string, r: Array<{ rps: number; p99: number }>) => ({
  route: name,
  'requests/s': Math.round(mean(r.map((x) => x.rps))),
  'p99 ms': Math.round(mean(r.map((x) => x.p99)) * 10) / 10,
})
const table = [row('bare @fastify/http-proxy', runs.bare), row('gateway, keyed (readonly key)', runs.keyed)]
console.table(table)
const ratio = table[1]!['requests/s'] / table[0]!['requests/s']
console.log(`keyed / bare throughput: ${(ratio * 100).toFixed(1)}% (aim: at least 85%)`)
process.exit(0)
