import { createRequire } from 'node:module'
import { privateKeyToAccount } from 'viem/accounts'
import { cleanups, createKey, gatewayEnv, runBench, startAdmin, startBase } from './fleet.ts'
import { autocannonRound } from './harness/autocannon.ts'
import { printReport } from './harness/report.ts'
import { type Ratio, runInterleaved, type Target } from './harness/rounds.ts'
import { positiveSetting } from './harness/settings.ts'
import { summarize } from './harness/stats.ts'
import { assertPortFree, cpuMicros, pinLoadGenerator, ready, start } from './processes.ts'

/**
 * pnpm bench:credit (and part of pnpm bench): what a request paid from prepaid credit costs the
 * gateway next to a keyed one, by CPU per request. A credit-paid request carries a session token
 * (Authorization: Bearer atcs_…, from one sign-in made here with x402's own wrapFetchWithSIWx):
 * the gateway reads it (memory after its first use), takes the amount in Redis with one Lua call,
 * and publishes it to the credit stream (group commit: at most a message every 10 ms under load),
 * waiting for the ack: a metered route's hold before proxying, a route's price once the answer is
 * below 400.
 *
 * Targets, each through the same gateway to the same echo upstream (bench/upstream.ts):
 *   keyed v1     POST /v1/chat/completions with a readwrite key
 *   credit v1    the same route with the session token: metered, a hold (the agent would report the use)
 *   keyed        GET /market/prices with a readonly key
 *   credit       GET /agent/skills with the session token: the route's price, debited once answered
 * The aim, a credit-paid request costing at most 1.25x a keyed one, is read on CPU µs per
 * request: keyed ÷ credit ≥ 80%. The wallet's credit is written into the Redis copy first (a
 * large amount), so the runs never ask the ledger's snapshot; the admin records the debits, on the
 * servers' core like the gateway, and its CPU per request is printed beside the gateway's.
 *
 * Method (bench/harness/rounds.ts): a warm-up round, then BENCH_CREDIT_ROUNDS rounds of the four
 * targets in the order above, BENCH_SECONDS each; medians with min..max over the rounds.
 *
 * Settings (environment):
 *   BENCH_SECONDS             4     length of each timed run, s
 *   BENCH_CREDIT_ROUNDS       5     counted rounds after the warm-up round
 *   BENCH_CONNECTIONS         50    concurrent autocannon connections
 *   BENCH_CREDIT_DEVNET_PORT  8697  the devnet's (anvil's) port
 *   LOG_LEVEL                 info  the gateway's and admin's log level (as deployed: an access-log line per request)
 *   BENCH_TARGETS             (all) the targets to run, comma-separated (ratios need both sides)
 *   BENCH_GATEWAY_NODE_OPTIONS      NODE_OPTIONS of the gateway, e.g. '--import ./bench/cpuProfile.mjs' for a CPU profile
 *   BENCH_ADMIN_NODE_OPTIONS        NODE_OPTIONS of the admin, the same way
 * With the defaults the bench takes about 1 min 40 s: 24 runs of 4 s, plus ~20 s to start and stop.
 */
const duration = positiveSetting('BENCH_SECONDS', 4)
const rounds = positiveSetting('BENCH_CREDIT_ROUNDS', 5)
const connections = positiveSetting('BENCH_CONNECTIONS', 50)
const devnetPort = Number(process.env.BENCH_CREDIT_DEVNET_PORT ?? 8697)
const only = process.env.BENCH_TARGETS?.split(',').map((name) => name.trim())

const GATEWAY = 'http://127.0.0.1:3970'
const ADMIN = 'http://127.0.0.1:3975'

// x402's sign-in client and the Redis client are the gateway's dependencies, not the root package's
const fromGateway = createRequire(new URL('../gateway/package.json', import.meta.url))
const { wrapFetchWithSIWx } = fromGateway('@x402/extensions/sign-in-with-x') as {
  wrapFetchWithSIWx: (inner: typeof fetch, signer: ReturnType<typeof privateKeyToAccount>) => typeof fetch
}
interface RedisClient {
  hset(key: string, values: Record<string, string>): Promise<number>
  del(key: string): Promise<number>
  disconnect(): void
}
const { Redis } = fromGateway('ioredis') as { Redis: new (url: string) => RedisClient }

const pinned = pinLoadGenerator()

async function main() {
  for (const port of [3970, 3971, 3975]) await assertPortFree(port, 'the credit bench needs 3970, 3971 and 3975')
  const base = await startBase({ devnetPort })
  const upstream = (await start('bench/upstream.ts', {}, 'pipe')).address
  const admin = await startAdmin(
    base,
    3975,
    process.env.BENCH_ADMIN_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_ADMIN_NODE_OPTIONS } : {},
  )
  const gateway = await start(
    'gateway/src/server.ts',
    gatewayEnv(base, ADMIN, {
      PORT: '3970',
      OPS_PORT: '3971',
      PUBLIC_URL: GATEWAY,
      AGENT_URL: upstream,
      MARKET_DATA_URL: upstream,
      PAY_TO: base.devnet.accounts[9]!.address,
      RATE_LIMIT_READONLY: '1000000000',
      RATE_LIMIT_READWRITE: '1000000000',
      PAID_RATE_LIMIT_PER_ADDRESS: '1000000000',
      PAID_RATE_LIMIT_PER_PAYER: '1000000000',
      MAX_CONCURRENT_PER_KEY: '100000',
      MAX_CONCURRENT_PER_ADDRESS: '100000',
      CREDIT_SESSION_TTL_SECONDS: '3600',
      ...(process.env.BENCH_GATEWAY_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_GATEWAY_NODE_OPTIONS } : {}),
    }),
    'ignore',
  )
  await ready(ADMIN, admin)
  await ready(['http://127.0.0.1:3971', GATEWAY], gateway)
  const readonlyKey = await createKey(base, GATEWAY, 'readonly')
  const readwriteKey = await createKey(base, GATEWAY, 'readwrite')

  // a wallet with ample credit in the gateways' copy, signed in once with x402's client
  const payer = privateKeyToAccount(base.devnet.accounts[1]!.privateKey)
  const redis = new Redis(base.env.REDIS_URL)
  const copy = `ats-credit:${base.chain.NATS_NAMESPACE}:${payer.address.toLowerCase()}:copy`
  await redis.hset(copy, { available: '1000000000000000', entry: '0', gen: 'bench' })
  cleanups.push(async () => {
    await redis.del(copy)
    redis.disconnect()
  })
  const session = await wrapFetchWithSIWx(fetch, payer)(`${GATEWAY}/credit/session`, { method: 'POST' })
  if (session.status !== 200) throw new Error(`POST /credit/session answered ${session.status} ${await session.text()}`)
  const token = ((await session.json()) as { token: string }).token

  const completion = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'hi' }] })
  const target = (name: string, label: string, url: string, authorization: string, body?: string): Target => ({
    name,
    label,
    async run({ seconds }) {
      const adminBefore = cpuMicros(admin.pid)
      const result = await autocannonRound({
        name: label,
        url,
        seconds,
        connections,
        headers: { authorization, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { requests: [{ method: 'POST', body }] } : {}),
        pid: gateway.pid,
      })
      // the ledger records every credit debit: on the servers' core too
      result.extra = { 'admin CPU µs/req': (cpuMicros(admin.pid) - adminBefore) / result.requests }
      return result
    },
  })
  const allTargets = [
    target('keyed v1', 'gateway, keyed, POST /v1/chat/completions', `${GATEWAY}/v1/chat/completions`, `Bearer ${readwriteKey}`, completion),
    target(
      'credit v1',
      'gateway, credit (session), POST /v1/chat/completions',
      `${GATEWAY}/v1/chat/completions`,
      `Bearer ${token}`,
      completion,
    ),
    target('keyed', 'gateway, keyed, GET /market/prices', `${GATEWAY}/market/prices`, `Bearer ${readonlyKey}`),
    target('credit', 'gateway, credit (session), GET /agent/skills', `${GATEWAY}/agent/skills`, `Bearer ${token}`),
  ]
  const targets = only ? allTargets.filter((t) => only.includes(t.name)) : allTargets
  if (only && targets.length !== only.length)
    throw new Error(`BENCH_TARGETS names unknown targets; known: ${allTargets.map((t) => t.name).join(',')}`)
  for (const t of targets) {
    const probe = await t.run({ round: 0, warmUp: true, seconds: 1 })
    if (probe.requests === 0) throw new Error(`${t.name}: no request answered`)
  }
  console.log(pinned ? 'autocannon on core 0, servers on core 1' : 'taskset not found: processes not pinned')
  console.log(
    `a warm-up round, then ${rounds} rounds of ${targets.map((t) => t.name).join(', ')}; ${duration} s each, ${connections} connections`,
  )
  const report = await runInterleaved({
    rounds,
    seconds: duration,
    targets,
    ratios: (
      [
        { name: 'credit / keyed, /v1, by CPU µs', numerator: 'credit v1', denominator: 'keyed v1', metric: 'cpu', aim: 80 },
        { name: 'credit / keyed, by CPU µs', numerator: 'credit', denominator: 'keyed', metric: 'cpu', aim: 80 },
        { name: 'credit / keyed, /v1, req/s', numerator: 'credit v1', denominator: 'keyed v1' },
      ] as Ratio[]
    ).filter((r) => targets.some((t) => t.name === r.numerator) && targets.some((t) => t.name === r.denominator)),
  })
  printReport(report)
  const cpu = (name: string) =>
    summarize(report.measurements.filter((m) => m.target === name).map((m) => m.result.cpuMicrosPerRequest ?? Number.NaN)).median
  for (const [credit, keyed] of [
    ['credit v1', 'keyed v1'],
    ['credit', 'keyed'],
  ] as const) {
    if (!targets.some((t) => t.name === credit) || !targets.some((t) => t.name === keyed)) continue
    console.log(
      `${credit}: ${cpu(credit).toFixed(0)} µs of gateway CPU a request, ${(cpu(credit) / cpu(keyed)).toFixed(2)}x ${keyed}'s ${cpu(keyed).toFixed(0)} µs (aim: at most 1.25x)`,
    )
  }
  console.log(`admin warnings and errors:\n${admin.problems()}`)
}

await runBench(main)
