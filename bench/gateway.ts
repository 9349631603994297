import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'
import { createServer } from 'node:net'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { paymentChannels } from '@ats/contracts'
import { freshDatabase } from '@ats/service-kit/testing'
// by path: @ats/devnet is a dependency of the gateway's tests, not of the root package
import { startDevnet } from '../packages/devnet/src/index.ts'
import { openPaymentsStream } from './jetstream.ts'
import { signPayments } from './payments.ts'

/**
 * pnpm bench: requests/s and p99 of a keyed route through the gateway (auth with
 * the key cache, Redis rate limit, identity headers, logging, metrics) next to
 * the same route through a bare @fastify/http-proxy, and of a paid x402 route
 * (payment header decoded, EIP-3009 signature recovered, payer balance from the
 * devnet chain, cached; nonce claimed in Redis), in one run on this machine.
 * Every server is its own process; autocannon runs in this one. Where taskset
 * exists, the load generator gets core 0 and the servers core 1, so the two
 * sides do not steal each other's time and runs repeat within a few percent.
 *
 * A paid request spends its payment (the nonce is claimed), so each one carries a
 * payment of its own: BENCH_PAID_RPS (6000, above what one core verifies) × seconds ×
 * (rounds + warm-up) are signed before the timed runs, at most BENCH_PAID_MAX (300,000).
 * Each charged request is also published to JetStream (a stream of the bench's own, deleted
 * at the end) and recorded by the admin service (settlement off), which runs on the servers'
 * core like the rest and so competes with the gateway during paid runs: its CPU per paid
 * request is printed, and after a paid run the next run starts only once the admin has
 * recorded every payment of it.
 */
const root = fileURLToPath(new URL('..', import.meta.url))
const duration = Number(process.env.BENCH_SECONDS ?? 10)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 50)
const rounds = Number(process.env.BENCH_ROUNDS ?? 2)
const paidRps = Number(process.env.BENCH_PAID_RPS ?? 6000)
const maxPayments = Number(process.env.BENCH_PAID_MAX ?? 300_000)
const devnetPort = Number(process.env.BENCH_DEVNET_PORT ?? 8691)

const pinned = spawnSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' }).status === 0
const children: ChildProcess[] = []
process.on('exit', () => children.forEach((c) => c.kill('SIGTERM')))

interface Started {
  pid: number
  address: string
  /** set when the process has exited: what it said on stderr */
  exited?: string
}

/** `stdout`: 'pipe' when the process prints its address first, else a file (descriptor) or 'ignore' */
function start(script: string, env: NodeJS.ProcessEnv, stdout: 'pipe' | 'ignore' | number): Promise<Started> {
  const command = [process.execPath, '--import', 'tsx', script]
  const [file, ...args] = pinned ? ['taskset', '-c', '1', ...command] : command
  const printsAddress = stdout === 'pipe'
  const child = spawn(file!, args, {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', stdout, 'pipe'],
  })
  children.push(child)
  let errors = ''
  child.stderr!.on('data', (d) => (errors += d))
  const started: Started = { pid: child.pid!, address: '' }
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => {
      started.exited = `${script} exited ${code}: ${errors}`
      reject(new Error(started.exited))
    })
    if (!printsAddress) return resolve(started)
    createInterface({ input: child.stdout! }).once('line', (line) => resolve({ ...started, address: line.trim() }))
  })
}

async function ready(url: string, server?: Started) {
  for (let i = 0; i < 240; i++) {
    // a server that died while starting: say why at once instead of waiting a minute
    if (server?.exited) throw new Error(`${url} never became ready: ${server.exited}`)
    try {
      if ((await fetch(`${url}/ready`)).ok) return
    } catch {}
    await new Promise((r) => setTimeout(r, 250))
  }
  throw new Error(`${url} never became ready`)
}

/** Throws when something already listens on the port: the bench would measure (or talk to) it instead. */
function assertPortFree(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', (error: NodeJS.ErrnoException) =>
      reject(new Error(`port ${port} is in use (${error.code}): a leftover bench process? the bench needs 3900-3902 and 3905`)),
    )
    server.listen(port, '127.0.0.1', () => server.close(() => resolve()))
  })
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

/** Pre-signed X-PAYMENT headers, each sent once. */
class PaymentPool {
  private used = 0
  exhausted = false
  constructor(private readonly headers: string[]) {}
  get size() {
    return this.headers.length
  }
  get left() {
    return this.headers.length - this.used
  }
  /** the next unused header, or undefined when all are spent */
  next(): string | undefined {
    if (this.used >= this.headers.length) return undefined
    const header = this.headers[this.used]!
    this.headers[this.used++] = '' // spent: let it be collected
    return header
  }
}

interface Target {
  name: string
  url: string
  pid: number
  key?: string
  payments?: PaymentPool
  runs: Run[]
}
type Run = { rps: number; p99: number; cpu: number; requests: number }

async function load(target: Target, measure: boolean): Promise<Run> {
  const before = measure ? cpuMicros(target.pid) : Number.NaN
  const { payments } = target
  let stop = () => {}
  const options: autocannon.Options = {
    url: target.url,
    connections,
    duration,
    headers: target.key ? { authorization: `Bearer ${target.key}` } : {},
  }
  if (payments) {
    let last = ''
    options.requests = [
      {
        // called for every request autocannon sends (and once per connection up front)
        setupRequest(request) {
          const header = payments.next()
          if (header === undefined) {
            payments.exhausted = true
            stop()
          } else last = header
          // out of payments: resend a spent one (402) until the stop takes effect; reported below
          request.headers = { ...request.headers, 'x-payment': header ?? last }
          return request
        },
      },
    ]
  }
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(options, (error, result) => (error ? reject(error) : resolve(result)))
    stop = () => instance.stop()
  })
  if (payments?.exhausted)
    throw new Error(
      `${target.url}: ran out of pre-signed payments (all ${payments.size} signed are spent, the last by this run): ` +
        `the paid route answered more than BENCH_PAID_RPS=${paidRps} requests/s; raise BENCH_PAID_RPS (and BENCH_PAID_MAX) or lower BENCH_SECONDS/BENCH_ROUNDS`,
    )
  if (result.non2xx > 0 || result.errors > 0) {
    const statuses = Object.entries(result.statusCodeStats ?? {}).map(([code, { count }]) => `${count} × ${code}`)
    const sample = await fetch(target.url, { headers: { ...(options.headers as Record<string, string>), ...(payments ? { 'x-payment': payments.next() ?? '' } : {}) } })
      .then(async (res) => `${res.status} ${(await res.text()).slice(0, 300)}`)
      .catch((error: Error) => error.message)
    throw new Error(`${target.name} (${target.url}): ${result.non2xx} non-2xx answers (${statuses.join(', ')}), ${result.errors} errors; one more request now: ${sample}`)
  }
  const cpuPerRequest = measure ? (cpuMicros(target.pid) - before) / result.requests.total : Number.NaN
  return { rps: result.requests.average, p99: result.latency.p99, cpu: cpuPerRequest, requests: result.requests.total }
}

// a database of its own, dropped at the end, so runs leave no keys behind; a devnet of its own too
const cleanups: Array<() => unknown> = []

async function main() {
  for (const port of [3900, 3901, 3902, 3905]) await assertPortFree(port)
  const env = {
    DATABASE_URL: await freshDatabase({ teardown: (fn) => cleanups.push(fn) }),
    NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    INTERNAL_TOKEN: randomBytes(18).toString('base64url'),
    ADMIN_API_KEY: `atsk_${randomBytes(24).toString('base64url')}`,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
  }

  // the chain the paid route reads payer balances from (anvil, mostly idle: balances are cached)
  const benchDir = mkdtempSync(join(tmpdir(), 'bench-'))
  cleanups.push(() => rmSync(benchDir, { recursive: true, force: true }))
  const addressBookPath = join(benchDir, 'address-book.json')
  const devnet = await startDevnet({ port: devnetPort, addressBookPath })
  cleanups.push(() => devnet.stop())
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')?.address
  if (!usdc) throw new Error('the devnet address book has no USDC')
  const payTo = devnet.accounts[9]!.address
  const payers = devnet.accounts.slice(1, 9) // each funded with 1,000,000 USDC

  // how many payments, and how long they must stay valid: signing, then every run of every row
  const rows = 4
  const wanted = Math.ceil(paidRps * duration * (rounds + 1)) + 2 // + the acceptance check and its replay
  const count = Math.min(wanted, maxPayments)
  const validFor = Math.ceil(count * 500e-6) + (rounds + 1) * rows * (duration + 3) + 120
  // the gateway accepts validBefore up to PAYMENT_TIMEOUT_SECONDS + 600 s ahead
  const paymentTimeout = Math.max(60, validFor - 600 + 30)

  // a NATS namespace of this run's own: its admin answers only its gateways (not a `pnpm start`
  // fleet's on this NATS), and its payments stream and blocked-payers bucket are removed at the end
  const namespace = `bench${randomBytes(6).toString('hex')}`
  const { stream: paymentsStream, blockedPayers, ledgerConsumer } = paymentChannels(namespace)
  const natsUrl = env.NATS_URL
  cleanups.push(async () => {
    const js = await openPaymentsStream(natsUrl, paymentsStream, ledgerConsumer)
    await js.remove([paymentsStream, `KV_${blockedPayers}`])
    await js.close()
  })
  const chain = { RPC_URL: devnet.rpcUrl, CHAIN_ID: String(devnet.chainId), NATS_NAMESPACE: namespace }

  const upstream = (await start('bench/upstream.ts', {}, 'pipe')).address
  const bare = await start('bench/bareProxy.ts', { UPSTREAM: upstream, PORT: '3901' }, 'pipe')
  // the admin records the charged payments (one ledger write per batch); settling them on the
  // devnet would add a transaction per request on anvil, so settlement is off
  const adminLog = join(benchDir, 'admin.log')
  const adminLogFd = openSync(adminLog, 'w')
  const adminEnv = { ...env, ...chain, PORT: '3905', HOST: '127.0.0.1', SETTLEMENT_ENABLED: 'false' }
  const admin = await start('services/admin/src/server.ts', adminEnv, adminLogFd)
  closeSync(adminLogFd)
  /** the admin's warnings and errors so far, each distinct one once, with how often */
  const adminProblems = () => {
    const seen = new Map<string, number>()
    for (const line of readFileSync(adminLog, 'utf8').split('\n')) {
      try {
        const entry = JSON.parse(line) as { level?: number; msg?: string; err?: { message?: string } }
        if ((entry.level ?? 0) < 40) continue
        const text = `${entry.msg ?? ''}${entry.err?.message ? `: ${entry.err.message}` : ''}`
        seen.set(text, (seen.get(text) ?? 0) + 1)
      } catch {}
    }
    return [...seen].map(([text, n]) => `  ${n} × ${text}`).join('\n') || '  (none)'
  }
  const gatewayEnv = {
    ...env,
    ...chain,
    HOST: '127.0.0.1',
    ADMIN_URL: 'http://127.0.0.1:3905',
    MARKET_DATA_URL: upstream,
    AGENT_URL: upstream,
    RATE_LIMIT_READONLY: '1000000000',
    PAY_TO: payTo,
    ADDRESS_BOOK: addressBookPath,
    PAYMENT_TIMEOUT_SECONDS: String(paymentTimeout),
    SKIP_PAYMENT: 'false',
  }
  // the same gateway twice: as deployed (access log at info) and with the access log off
  const gateway = await start('gateway/src/server.ts', { ...gatewayEnv, PORT: '3900' }, 'ignore')
  const quiet = await start('gateway/src/server.ts', { ...gatewayEnv, PORT: '3902', LOG_LEVEL: 'warn' }, 'ignore')

  // sign here (core 0) while the servers start (core 1)
  const signStarted = performance.now()
  const now = BigInt(Math.floor(Date.now() / 1000))
  const headers = signPayments({
    count,
    payers,
    payTo,
    usdc,
    chainId: devnet.chainId,
    value: 10_000n, // the gateway's default PAYMENT_PRICE
    validAfter: now - 60n,
    validBefore: now + BigInt(validFor),
  })
  const signSeconds = (performance.now() - signStarted) / 1000
  const payments = new PaymentPool(headers)

  await ready('http://127.0.0.1:3905', admin)
  await ready('http://127.0.0.1:3900', gateway)
  await ready('http://127.0.0.1:3902', quiet)

  const created = await fetch('http://127.0.0.1:3900/admin/keys', {
    method: 'POST',
    headers: { authorization: `Bearer ${env.ADMIN_API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ tier: 'readonly', label: 'bench' }),
  })
  if (!created.ok) throw new Error(`POST /admin/keys answered ${created.status} ${await created.text()}`)
  const { key } = (await created.json()) as { key: string }

  // one pre-signed payment must pass, and its replay must not: the paid runs measure real verification
  const paidUrl = 'http://127.0.0.1:3900/agent/skills'
  const probe = payments.next()!
  const accepted = await fetch(paidUrl, { headers: { 'x-payment': probe } })
  if (accepted.status !== 200)
    throw new Error(`a pre-signed payment was refused: GET /agent/skills answered ${accepted.status} ${await accepted.text()}`)
  await accepted.body?.cancel()
  const replay = await fetch(paidUrl, { headers: { 'x-payment': probe } })
  if (replay.status !== 402) throw new Error(`a replayed payment was not refused: GET /agent/skills answered ${replay.status} ${await replay.text()}`)
  await replay.body?.cancel()

  // the admin's ledger consumer: a paid run leaves a backlog of payment events behind, and the
  // next run (another row) must not pay for recording them
  const ledger = await openPaymentsStream(natsUrl, paymentsStream, ledgerConsumer)
  cleanups.push(() => ledger.close())
  const ledgerCaughtUp = async (timeoutMs = Math.max(60_000, duration * 10_000)) => {
    try {
      return await ledger.caughtUp(timeoutMs)
    } catch (error) {
      throw new Error(`${(error as Error).message}\nadmin warnings and errors:\n${adminProblems()}`)
    }
  }
  // the accepted payment above must reach the ledger; when the admin records nothing at all the
  // bench goes on (the gateway's figures still mean something) but says so loudly, twice
  let ledgerBroken: string | undefined
  try {
    await ledgerCaughtUp(10_000)
  } catch (error) {
    ledgerBroken = (error as Error).message
    console.warn(`WARNING: the admin records no payments, so the paid runs leave out its ledger work:\n${ledgerBroken}`)
  }
  const paidExtras: Array<{ catchUpMs: number; adminCpu: number }> = []

  const targets: Target[] = [
    { name: 'bare @fastify/http-proxy', url: `${bare.address}/market/prices`, pid: bare.pid, runs: [] },
    { name: 'gateway, keyed (readonly key)', url: 'http://127.0.0.1:3900/market/prices', pid: gateway.pid, key, runs: [] },
    { name: 'gateway, keyed, LOG_LEVEL=warn', url: 'http://127.0.0.1:3902/market/prices', pid: quiet.pid, key, runs: [] },
    { name: 'gateway, paid (x402)', url: paidUrl, pid: gateway.pid, payments, runs: [] },
  ]

  console.log(pinned ? 'autocannon on core 0, servers on core 1' : 'taskset not found: processes not pinned')
  console.log(
    `signed ${count} x402 payments in ${signSeconds.toFixed(1)} s (${payers.length} payers; ` +
      `${paidRps} requests/s × ${duration} s × ${rounds + 1} runs${count < wanted ? `, capped by BENCH_PAID_MAX from ${wanted}` : ''}); ` +
      'one was accepted and refused when replayed',
  )
  console.log(
    `warming up; then ${rounds} rounds of ${duration} s each, ${connections} connections, GET /market/prices (keyed), GET /agent/skills (paid, one payment per request)`,
  )
  const run = async (target: Target, measure: boolean) => {
    const adminBefore = cpuMicros(admin.pid)
    const result = await load(target, measure)
    if (target.payments && !ledgerBroken) {
      const catchUpMs = await ledgerCaughtUp()
      if (measure) paidExtras.push({ catchUpMs, adminCpu: (cpuMicros(admin.pid) - adminBefore) / result.requests })
    }
    return result
  }
  for (const target of targets) await run(target, false)
  for (let i = 0; i < rounds; i++) {
    for (const target of targets) target.runs.push(await run(target, true))
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
  const table = targets.map(({ name, runs }) => ({
    route: name,
    'requests/s': Math.round(mean(runs.map((x) => x.rps))),
    'p99 ms': Math.round(mean(runs.map((x) => x.p99)) * 10) / 10,
    'proxy CPU µs/request': Math.round(mean(runs.map((x) => x.cpu)) * 10) / 10,
  }))
  console.table(table)
  const [bareRow, keyedRow, quietRow, paidRow] = table as [(typeof table)[0], (typeof table)[0], (typeof table)[0], (typeof table)[0]]
  const ratio = (row: typeof bareRow, base: typeof bareRow) => ((row['requests/s'] / base['requests/s']) * 100).toFixed(1)
  console.log(`keyed / bare throughput: ${ratio(keyedRow, bareRow)}% (access log on), ${ratio(quietRow, bareRow)}% (access log off); aim: at least 85%`)
  console.log(`paid / keyed throughput: ${ratio(paidRow, keyedRow)}%; aim: at least 40%`)
  const { published, pending } = await ledger.backlog()
  if (ledgerBroken)
    console.warn(
      `WARNING: the admin recorded none of the ${published} stream messages (${pending} pending): ` +
        'the paid figures leave out the ledger consumer that shares the servers core; see the warning above',
    )
  else
    console.log(
      `paid runs: admin (ledger consumer, same core) CPU ${mean(paidExtras.map((x) => x.adminCpu)).toFixed(1)} µs per paid request; ` +
        `it had recorded every payment ${Math.round(mean(paidExtras.map((x) => x.catchUpMs)))} ms after a run ended; ` +
        `${published} stream messages in all (payments are batched while a publish is in flight)`,
    )
  console.log(`${payments.left} of ${payments.size} signed payments left unspent`)
}

let failed = false
try {
  await main()
} catch (error) {
  console.error(error)
  failed = true
} finally {
  children.forEach((c) => c.kill('SIGTERM'))
  await Promise.all(children.map((c) => new Promise((resolve) => (c.exitCode === null && c.signalCode === null ? c.once('exit', resolve) : resolve(null)))))
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup()
    } catch (error) {
      console.error('cleanup failed:', error)
    }
  }
}
process.exit(failed ? 1 : 0)
