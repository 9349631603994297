import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'
import { readFileSync } from 'node:fs'
import autocannon from 'autocannon'
import { freshDatabase } from '@ats/service-kit/testing'

/**
 * pnpm bench: requests/s and p99 of a keyed route through the gateway (auth with
 * the key cache, Redis rate limit, identity headers, logging, metrics) next to
 * the same route through a bare @fastify/http-proxy, in one run on this machine.
 * Every server is its own process; autocannon runs in this one. Where taskset
 * exists, the load generator gets core 0 and the servers core 1, so the two
 * sides do not steal each other's time and runs repeat within a few percent.
 */
const root = fileURLToPath(new URL('..', import.meta.url))
const duration = Number(process.env.BENCH_SECONDS ?? 10)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 50)
const rounds = Number(process.env.BENCH_ROUNDS ?? 2)

const pinned = spawnSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' }).status === 0
const children: ChildProcess[] = []
process.on('exit', () => children.forEach((c) => c.kill('SIGTERM')))

interface Started {
  pid: number
  address: string
}

function start(script: string, env: NodeJS.ProcessEnv, printsAddress: boolean): Promise<Started> {
  const command = [process.execPath, '--import', 'tsx', script]
  const [file, ...args] = pinned ? ['taskset', '-c', '1', ...command] : command
  const child = spawn(file!, args, {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', printsAddress ? 'pipe' : 'ignore', 'pipe'],
  })
  children.push(child)
  let errors = ''
  child.stderr!.on('data', (d) => (errors += d))
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`${script} exited ${code}: ${errors}`)))
    if (!printsAddress) return resolve({ pid: child.pid!, address: '' })
    createInterface({ input: child.stdout! }).once('line', (line) => resolve({ pid: child.pid!, address: line.trim() }))
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

/** CPU time (user + system, µs) a process has used so far, from /proc. */
function cpuMicros(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100
  } catch {
    return Number.NaN
  }
}

async function load(url: string, key?: string, pid?: number) {
  const before = pid ? cpuMicros(pid) : Number.NaN
  const result = await autocannon({
    url,
    connections,
    duration,
    headers: key ? { authorization: `Bearer ${key}` } : {},
  })
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx answers, ${result.errors} errors`)
  const cpuPerRequest = pid ? (cpuMicros(pid) - before) / result.requests.total : Number.NaN
  return { rps: result.requests.average, p99: result.latency.p99, cpu: cpuPerRequest }
}

// a database of its own, dropped at the end, so runs leave no keys behind
const cleanups: Array<() => unknown> = []
const env = {
  DATABASE_URL: await freshDatabase({ teardown: (fn) => cleanups.push(fn) }),
  NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  INTERNAL_TOKEN: randomBytes(18).toString('base64url'),
  ADMIN_API_KEY: `atsk_${randomBytes(24).toString('base64url')}`,
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
}
const upstream = (await start('bench/upstream.ts', {}, true)).address
const bare = await start('bench/bareProxy.ts', { UPSTREAM: upstream, PORT: '3901' }, true)
await start('services/admin/src/server.ts', { ...env, PORT: '3905', HOST: '127.0.0.1' }, false)
await ready('http://127.0.0.1:3905')
const gatewayEnv = {
  ...env,
  HOST: '127.0.0.1',
  ADMIN_URL: 'http://127.0.0.1:3905',
  MARKET_DATA_URL: upstream,
  RATE_LIMIT_READONLY: '1000000000',
}
// the same gateway twice: as deployed (access log at info) and with the access log off
const gateway = await start('gateway/src/server.ts', { ...gatewayEnv, PORT: '3900' }, false)
const quiet = await start('gateway/src/server.ts', { ...gatewayEnv, PORT: '3902', LOG_LEVEL: 'warn' }, false)
await ready('http://127.0.0.1:3900')
await ready('http://127.0.0.1:3902')

const created = await fetch('http://127.0.0.1:3900/admin/keys', {
  method: 'POST',
  headers: { authorization: `Bearer ${env.ADMIN_API_KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ tier: 'readonly', label: 'bench' }),
})
const { key } = (await created.json()) as { key: string }

type Run = { rps: number; p99: number; cpu: number }
const targets = [
  { name: 'bare @fastify/http-proxy', url: `${bare.address}/market/prices`, pid: bare.pid, key: undefined, runs: [] as Run[] },
  { name: 'gateway, keyed (readonly key)', url: 'http://127.0.0.1:3900/market/prices', pid: gateway.pid, key, runs: [] as Run[] },
  { name: 'gateway, keyed, LOG_LEVEL=warn', url: 'http://127.0.0.1:3902/market/prices', pid: quiet.pid, key, runs: [] as Run[] },
]

console.log(pinned ? 'autocannon on core 0, servers on core 1' : 'taskset not found: processes not pinned')
console.log(`warming up; then ${rounds} rounds of ${duration} s each, ${connections} connections, GET /market/prices`)
for (const target of targets) await load(target.url, target.key)
for (let i = 0; i < rounds; i++) {
  for (const target of targets) target.runs.push(await load(target.url, target.key, target.pid))
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
const table = targets.map(({ name, runs }) => ({
  route: name,
  'requests/s': Math.round(mean(runs.map((x) => x.rps))),
  'p99 ms': Math.round(mean(runs.map((x) => x.p99)) * 10) / 10,
  'proxy CPU µs/request': Math.round(mean(runs.map((x) => x.cpu)) * 10) / 10,
}))
console.table(table)
const [bareRow, keyedRow, quietRow] = table as [(typeof table)[0], (typeof table)[0], (typeof table)[0]]
const percent = (row: typeof bareRow) => ((row['requests/s'] / bareRow['requests/s']) * 100).toFixed(1)
console.log(`keyed / bare throughput: ${percent(keyedRow)}% (access log on), ${percent(quietRow)}% (access log off); aim: at least 85%`)
children.forEach((c) => c.kill('SIGTERM'))
await Promise.all(children.map((c) => new Promise((resolve) => (c.exitCode === null ? c.once('exit', resolve) : resolve(null)))))
for (const cleanup of cleanups) await cleanup()
process.exit(0)
