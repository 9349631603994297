import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { closeSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs'
import {
  Agent,
  createServer as createHttpServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http'
import { createRequire } from 'node:module'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  freePorts,
  startNatsCluster,
  startPrivatePostgres,
  startSentinelRedis,
  type NatsCluster,
  type PrivatePostgres,
  type SentinelRedis,
} from '@ats/service-kit/testing'
// by path, as bench/ does: the root package depends on neither
import { startDevnet } from '../packages/devnet/src/index.ts'
import { signPayments } from '../bench/payments.ts'
import { generateApiKey } from '../services/admin/src/keys/apiKeys.ts'
import { fleetAccess, type FleetAccess } from '@ats/fleet/access'
import { fleetMembers, root } from '@ats/fleet'

/**
 * pnpm rehearse: the fleet at scale on this machine, under load, with faults.
 *
 * A 3-node NATS cluster (JETSTREAM_REPLICAS=3), a private Redis under Sentinel (a primary, 2
 * replicas, 3 sentinels; one server with --single-redis), a Postgres server of its own and a devnet;
 * 2 gateways behind a round-robin front, 2 replicas of every service (each pair behind a front
 * of its own, as a Kubernetes Service would be), 2 agent workers and 3 automation schedulers.
 * With paid and keyed load running it kills, one at a time: a NATS node (SIGKILL, then back),
 * a gateway, an agent worker mid-job, an automation scheduler mid-run (all SIGKILL, left dead),
 * Postgres (its own server, crashed and started again after a few seconds), and the Redis primary (the sentinels promote a replica; with --single-redis, the one Redis for
 * a few seconds). Then it checks the books (the check… functions below), prints one line a
 * check, and exits 1 when one fails. Every process's log is kept in the run's directory.
 */

// pg is a dependency of the kit, not of the root package
const kitRequire = createRequire(new URL('../packages/service-kit/package.json', import.meta.url))
interface Pool {
  query(sql: string, params?: unknown[]): Promise<{ rows: unknown[] }>
  end(): Promise<void>
  on(event: 'error', listener: (error: Error) => void): void
}
const pg = kitRequire('pg') as { Pool: new (options: { connectionString: string; max: number }) => Pool }

const began = Date.now()
const elapsed = () => `${((Date.now() - began) / 1000).toFixed(1)} s`
const say = (line: string) => process.stdout.write(`[${elapsed().padStart(7)}] ${line}\n`)

/** Load, per second: paid (x402) prompts and reads, keyed reads. Modest: ~20 processes share 2 cores. */
const RATE = { prompt: 4, paidRead: 2, keyed: 20 }
const FAULT_HOLD_MS = 10_000
const NAMESPACE = 'rehearse'
const REDIS_DOWN_MS = 4_000
/** how long Postgres stays down after its crash (a managed failover takes seconds to a minute) */
const POSTGRES_DOWN_MS = 5_000
/**
 * Sentinel by default, as production runs Redis (docs/operations.md): the failover is the fault
 * that matters there. --single-redis keeps one server, killed for REDIS_DOWN_MS and started empty.
 */
const SENTINEL = !process.argv.includes('--single-redis')

// ---------------------------------------------------------------------------------------------
// Per-component credentials
// ---------------------------------------------------------------------------------------------

type Component = 'gateway' | 'admin' | 'agent' | 'trading' | 'market-data' | 'automation'

let access: FleetAccess | undefined
let natsUrls = ''

/**
 * The settings one component's processes get on top of the shared ones: its own NATS user (the
 * cluster's nodes know only these users, each allowed the subjects its contract declares) and
 * its own Postgres role (its schema only), from scripts/access.ts as `pnpm start` uses them.
 */
function componentEnv(component: Component): NodeJS.ProcessEnv {
  return access ? access.envOf(component, natsUrls) : {}
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

interface Proc {
  name: string
  component: Component
  child: ChildProcess
  /** where /ready answers */
  readyUrl: string
  /** where clients (the fronts) reach it */
  url: string
  log: string
  /** set when the rehearsal killed it on purpose */
  killedOnPurpose?: boolean
}

const procs: Proc[] = []
const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null
let runDir = ''

function spawnProc(name: string, component: Component, entry: string, env: NodeJS.ProcessEnv, url: string, readyUrl = url): Proc {
  const log = join(runDir, `${name}.log`)
  const fd = openSync(log, 'w')
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, entry)], {
    cwd: root,
    env: { ...process.env, ...env, ...componentEnv(component) },
    stdio: ['ignore', fd, fd],
  })
  closeSync(fd)
  const proc = { name, component, child, readyUrl, url, log }
  procs.push(proc)
  return proc
}

async function waitReady(proc: Proc, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (!alive(proc.child)) throw new Error(`${proc.name} exited while starting: ${readFileSync(proc.log, 'utf8').slice(-1500)}`)
    if (
      await fetch(`${proc.readyUrl}/ready`, { signal: AbortSignal.timeout(2000) }).then(
        (r) => r.ok,
        () => false,
      )
    )
      return
    await sleep(250)
  }
  throw new Error(`${proc.name} was not ready within ${timeoutMs / 1000} s (log: ${proc.log})`)
}

async function killProc(proc: Proc, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  proc.killedOnPurpose = true
  if (!alive(proc.child)) return
  const exited = once(proc.child, 'exit')
  proc.child.kill(signal)
  // a process that does not stop within 15 s is SIGKILLed
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), 15_000)
  await exited
  clearTimeout(timer)
}

// ---------------------------------------------------------------------------------------------
// Round-robin fronts (the load balancer before the gateways; a Service before each pair)
// ---------------------------------------------------------------------------------------------

interface Backend {
  name: string
  url: string
  readyUrl: string
  up: boolean
}

interface Front {
  name: string
  url: string
  backends: Backend[]
  /** requests the front answered itself, by reason */
  own: Map<string, number>
  close(): void
}

/**
 * A small HTTP round-robin proxy, as a load balancer behaves: it skips backends whose /ready
 * fails (checked every 500 ms), tries the next one when a connection is refused (nothing was
 * sent) and, for a GET, when the connection is reset before an answer began (nginx's
 * `proxy_next_upstream error`: counted as `retried`). Otherwise it answers 502 itself when a
 * backend drops a request in flight (marked `x-rehearsal-front: cut`).
 */
async function startFront(name: string, backends: Backend[]): Promise<Front> {
  const agent = new Agent({ keepAlive: true, maxSockets: 512 })
  const own = new Map<string, number>()
  let next = 0
  const pick = (tried: Set<Backend>) => {
    const up = backends.filter((b) => b.up && !tried.has(b))
    const pool = up.length > 0 ? up : backends.filter((b) => !tried.has(b)) // none ready: try them all
    return pool.length === 0 ? undefined : pool[next++ % pool.length]
  }
  const ownAnswer = (res: ServerResponse, status: number, reason: string, error: string) => {
    own.set(reason, (own.get(reason) ?? 0) + 1)
    if (res.headersSent) return void res.destroy()
    res.writeHead(status, { 'content-type': 'application/json', 'x-rehearsal-front': reason })
    res.end(JSON.stringify({ error }))
  }
  const forward = (backend: Backend, req: IncomingMessage, body: Buffer, res: ServerResponse) =>
    new Promise<void>((resolve, reject) => {
      const upstream = httpRequest(`${backend.url}${req.url}`, { method: req.method, headers: req.headers, agent }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(res)
        answer.once('end', resolve)
        answer.once('aborted', () => reject(Object.assign(new Error('aborted mid-answer'), { code: 'ECONNRESET' })))
      })
      upstream.once('error', reject)
      upstream.end(body)
    })
  const server: Server = createHttpServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks)
    const tried = new Set<Backend>()
    for (;;) {
      const backend = pick(tried)
      if (!backend) return ownAnswer(res, 503, 'none', `no ${name} replica answers`)
      tried.add(backend)
      try {
        return await forward(backend, req, body, res)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code
        backend.up = false
        // refused: nothing reached it, the next one may take the request
        if (code === 'ECONNREFUSED' && !res.headersSent) continue
        // reset before an answer: a GET may be asked of the next one
        if (req.method === 'GET' && !res.headersSent && tried.size < backends.length) {
          own.set('retried', (own.get('retried') ?? 0) + 1)
          continue
        }
        return ownAnswer(
          res,
          502,
          'cut',
          `${backend.name} closed the connection with the request in flight (${code ?? (error as Error).message})`,
        )
      }
    }
  })
  server.keepAliveTimeout = 60_000
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const health = setInterval(() => {
    for (const backend of backends) {
      void fetch(`${backend.readyUrl}/ready`, { signal: AbortSignal.timeout(1000) }).then(
        (r) => (backend.up = r.ok),
        () => (backend.up = false),
      )
    }
  }, 500)
  return {
    name,
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    backends,
    own,
    close: () => {
      clearInterval(health)
      server.closeAllConnections()
      server.close()
      agent.destroy()
    },
  }
}

const backendOf = (proc: Proc): Backend => ({ name: proc.name, url: proc.url, readyUrl: proc.readyUrl, up: true })

// ---------------------------------------------------------------------------------------------
// Redis of the rehearsal's own (the machine's, on 6379, is shared: never killed)
// ---------------------------------------------------------------------------------------------

interface PrivateRedis {
  url: string
  kill(): Promise<void>
  start(): Promise<void>
  stop(): Promise<void>
}

async function startRedis(port: number): Promise<PrivateRedis> {
  let child: ChildProcess | undefined
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    for (let i = 0; i < 100; i++) {
      const open = await new Promise<boolean>((resolve) => {
        const socket = createServer().listen(port, '127.0.0.1')
        socket.once('listening', () => socket.close(() => resolve(false)))
        socket.once('error', () => resolve(true))
      })
      if (open) return
      await sleep(50)
    }
    throw new Error(`redis-server did not listen on ${port}`)
  }
  const kill = async () => {
    if (!child || !alive(child)) return
    const exited = once(child, 'exit')
    child.kill('SIGKILL')
    await exited
  }
  await start()
  return { url: `redis://127.0.0.1:${port}`, kill, start, stop: kill }
}

// ---------------------------------------------------------------------------------------------
// Load
// ---------------------------------------------------------------------------------------------

interface Sample {
  kind: 'prompt' | 'paidRead' | 'keyed'
  route: string
  phase: string
  status: number
  ms: number
  /** the front's own answer (cut, none), if it was one */
  front?: string
  error?: string
  jsonError: boolean
  nonce?: string
  /** the payment header, and its payer (lower-case), of a paid request */
  payment?: string
  payer?: string
  jobId?: string
  final: boolean
  /** when it was sent (epoch ms) */
  at: number
}

const samples: Sample[] = []
let phase = 'steady'

interface LoadContext {
  front: string
  /** keys the keyed load takes in turn (many clients, not one key with everything in flight) */
  loadKeys: string[]
  signPayment(): { header: string; nonce: string; payer: string }
}

let sent = 0

/** One request of `kind` through the front: keyed reads alternate prices and quotes over the keys; paid ones carry a fresh payment. */
async function send(ctx: LoadContext, kind: Sample['kind'], final = false): Promise<Sample> {
  const n = sent++
  if (kind === 'keyed') {
    const headers = { authorization: `Bearer ${ctx.loadKeys[Math.floor(n / 2) % ctx.loadKeys.length]}` }
    if (n % 2 === 0) return request(ctx, kind, 'GET /market/prices', '/market/prices', { headers }, undefined, final)
    return request(ctx, kind, 'GET /swap/quote', '/swap/quote?tokenIn=USDC&tokenOut=ARB&amountIn=1000000', { headers }, undefined, final)
  }
  const payment = ctx.signPayment()
  if (kind === 'prompt') {
    const init = {
      method: 'POST',
      headers: { 'x-payment': payment.header, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'What is the price of ARB?' }),
    }
    return request(ctx, kind, 'POST /agent/prompt', '/agent/prompt', init, payment, final)
  }
  return request(ctx, kind, 'GET /agent/skills', '/agent/skills', { headers: { 'x-payment': payment.header } }, payment, final)
}

async function request(
  ctx: LoadContext,
  kind: Sample['kind'],
  route: string,
  path: string,
  init: RequestInit,
  payment: { header: string; nonce: string; payer: string } | undefined,
  final: boolean,
): Promise<Sample> {
  const started = performance.now()
  const sample: Sample = { kind, route, phase, status: 0, ms: 0, jsonError: false, final, at: Date.now() }
  if (payment) Object.assign(sample, { nonce: payment.nonce, payment: payment.header, payer: payment.payer })
  try {
    const res = await fetch(`${ctx.front}${path}`, { ...init, signal: AbortSignal.timeout(60_000) })
    sample.status = res.status
    const front = res.headers.get('x-rehearsal-front')
    if (front) sample.front = front
    const text = await res.text()
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {}
    if (res.status >= 400) {
      const error = (body as { error?: unknown } | undefined)?.error
      sample.jsonError = typeof error === 'string'
      sample.error = typeof error === 'string' ? error : text.slice(0, 200)
    } else if (kind === 'prompt') {
      sample.jobId = (body as { jobId?: string }).jobId
    }
  } catch (error) {
    sample.error = `no answer: ${(error as Error).message}`
  }
  sample.ms = performance.now() - started
  samples.push(sample)
  return sample
}

/** Sends `rate` requests a second of `kind` until stopped (open loop; at most 200 in flight). */
function steady(ctx: LoadContext, kind: Sample['kind'], rate: number) {
  let inFlight = 0
  let skipped = 0
  const timer = setInterval(() => {
    if (inFlight >= 200) return void skipped++
    inFlight++
    void send(ctx, kind).finally(() => inFlight--)
  }, 1000 / rate)
  return {
    stop: async () => {
      clearInterval(timer)
      while (inFlight > 0) await sleep(100)
      return skipped
    },
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers over the database and the chain
// ---------------------------------------------------------------------------------------------

let db: Pool
const q = async <T = Record<string, any>>(sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows as T[]

async function rpc<T>(url: string, method: string, params: unknown[]): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  })
  const body = (await res.json()) as { result?: T; error?: { message: string } }
  if (body.error) throw new Error(`${method}: ${body.error.message}`)
  return body.result as T
}

interface StreamState {
  name: string
  leader?: string
  /** copies configured */
  replicas: number
  /** every copy but the leader's is current and online */
  current: boolean
}

/**
 * The cluster's streams as their leaders' monitoring endpoints show them (no NATS user needed):
 * only a stream's leader knows whether its followers are current.
 */
async function streamsOf(cluster: NatsCluster): Promise<StreamState[]> {
  type Detail = {
    name: string
    config?: { num_replicas?: number }
    cluster?: { leader?: string; replicas?: Array<{ current?: boolean; offline?: boolean }> }
  }
  type Jsz = { account_details?: Array<{ stream_detail?: Detail[] }> }
  const views = await Promise.all(
    cluster.monitors.map(async (monitor) => {
      const jsz = (await fetch(`${monitor}/jsz?accounts=true&streams=true&config=true`).then(
        (r) => r.json(),
        () => undefined,
      )) as Jsz | undefined
      return (jsz?.account_details ?? []).flatMap((a) => a.stream_detail ?? [])
    }),
  )
  const names = new Set(views.flat().map((s) => s.name))
  return [...names].map((name) => {
    const any = views.flat().find((s) => s.name === name)!
    const leader = any.cluster?.leader
    const view = views[cluster.names.indexOf(leader ?? '')]?.find((s) => s.name === name) ?? any
    return {
      name,
      leader,
      replicas: view.config?.num_replicas ?? 1,
      current:
        view.cluster?.leader === leader &&
        (view.cluster?.replicas ?? []).length === (view.config?.num_replicas ?? 1) - 1 &&
        (view.cluster?.replicas ?? []).every((r) => r.current && !r.offline),
    }
  })
}

async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number, everyMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(everyMs)
  }
}

/**
 * Kills `victim` while it holds work: the others doing the same work are paused (SIGSTOP) for a
 * moment, so whatever `claimedSince` finds claimed after the pause began is the victim's; it is
 * SIGKILLed at once, and the others resumed. Resolves with what the victim held.
 */
async function killMidWork(victim: Proc, others: Proc[], claimedSince: (since: Date) => Promise<string | undefined>): Promise<string> {
  for (const other of others) other.child.kill('SIGSTOP')
  try {
    const { now } = (await q<{ now: Date }>('SELECT now()'))[0]!
    const held = await until(`${victim.name} to take work`, () => claimedSince(now), 20_000, 5)
    await killProc(victim)
    return held
  } finally {
    for (const other of others) other.child.kill('SIGCONT')
  }
}

/** Why a route answered 503: the gateway's reasons for failing closed, by their message. */
function whyClosed(answer: string): string {
  const reasons: Array<[RegExp, string]> = [
    [
      /payment verification is unavailable/,
      'paid routes fail closed without Redis: used nonces, payment ids and balance reservations live there, and a payment checked without them could be spent twice',
    ],
    [
      /payments cannot be recorded/,
      'paid routes fail closed while the payments stream takes no charges: an answer is given only when its charge can be recorded',
    ],
    [
      /API key verification is unavailable/,
      'keyed routes fail closed when admin does not answer a key lookup (NATS): an unverified key is not let through',
    ],
    [
      /the database is unavailable for a moment/,
      'what must be written to Postgres (a paid prompt becomes a job row) waits for it: 503, retryable, and the payment is not charged',
    ],
    [/service unavailable|did not answer in time/, 'the service behind the route did not answer: the gateway says so rather than wait'],
    [/no \S+ replica answers/, 'the front had no replica to send to'],
  ]
  return reasons.find(([pattern]) => pattern.test(answer))?.[1] ?? 'not one of the known reasons: see the logs'
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

const cleanups: Array<() => unknown> = []
const report: string[] = []
const out = (line: string) => {
  report.push(line)
  process.stdout.write(`${line}\n`)
}
const ok2xx = (s: Sample) => s.status >= 200 && s.status < 300

interface Infrastructure {
  cluster: NatsCluster
  redis: PrivateRedis | SentinelRedis
  /** the run's own Postgres server, crashed and started again under load */
  postgres: PrivatePostgres
  databaseUrl: string
  devnet: Awaited<ReturnType<typeof startDevnet>>
}

/**
 * A Redis, a Postgres server (its own: it is crashed under load) and a devnet of the run's own;
 * each component's NATS user and Postgres role; then the cluster, which knows only those users.
 */
async function startInfrastructure(): Promise<Infrastructure> {
  const ports = await freePorts(2)
  const [redis, postgres, devnet, members] = await Promise.all([
    SENTINEL ? startSentinelRedis({ replicas: 2 }) : startRedis(ports[0]!),
    startPrivatePostgres(),
    startDevnet({ port: ports[1]!, addressBookPath: join(runDir, 'address-book.json') }),
    fleetMembers(),
  ])
  cleanups.push(
    () => redis.stop(),
    () => postgres.stop(),
    () => devnet.stop(),
  )
  const databaseUrl = postgres.url.replace(/\/postgres$/, '/ats')
  const admin = new pg.Pool({ connectionString: postgres.url, max: 1 })
  await admin.query('CREATE DATABASE ats')
  await admin.end()
  db = new pg.Pool({ connectionString: databaseUrl, max: 4 })
  // the pool's idle connections are cut when Postgres crashes: the next query opens new ones
  db.on('error', () => undefined)
  cleanups.push(() => db.end())
  const rolePrefix = `rh${randomBytes(4).toString('hex')}`
  const made = await fleetAccess({ members, namespace: NAMESPACE, databaseUrl, rolePrefix })
  access = made
  const cluster = await startNatsCluster({ nodes: 3, timeoutMs: 30_000, authorization: made.natsAuthorization })
  cleanups.push(() => cluster.stop())
  natsUrls = cluster.urls.join(',')
  const redisAt =
    'sentinels' in redis
      ? `sentinels ${redis.sentinels} (primary :${redis.ports[0]}, replicas :${redis.ports.slice(1).join(', :')})`
      : redis.url
  say(`NATS cluster ${natsUrls} (one user per component); Redis ${redisAt}; devnet ${devnet.rpcUrl}`)
  say(`Postgres 127.0.0.1:${postgres.port} (the run's own), roles ${made.roles.map((r) => r.role).join(', ')}`)
  return { cluster, redis, postgres, databaseUrl, devnet }
}

interface Fleet {
  adminKey: string
  payTo: `0x${string}`
  front: Front
  /** every front: the gateways' and each service's */
  fronts: Front[]
  gateways: Proc[]
  workers: Proc[]
  schedulers: Proc[]
}

/** Every process, the first replica of each service first (it migrates its schema), the gateways last, and the fronts. */
async function startFleet({ redis, databaseUrl, devnet }: Infrastructure): Promise<Fleet> {
  const adminKey = generateApiKey()
  const payTo = devnet.accounts[9]!.address
  const base: NodeJS.ProcessEnv = {
    DATABASE_URL: databaseUrl,
    NATS_URL: natsUrls,
    JETSTREAM_REPLICAS: '3',
    NATS_NAMESPACE: NAMESPACE,
    REDIS_URL: redis.url,
    ...('sentinels' in redis ? { REDIS_SENTINELS: redis.sentinels, REDIS_SENTINEL_MASTER: redis.master } : {}),
    INTERNAL_TOKEN: randomBytes(24).toString('base64url'),
    RPC_URL: devnet.rpcUrl,
    CHAIN_ID: String(devnet.chainId),
    CHAIN_NAME: 'devnet',
    ADDRESS_BOOK: devnet.addressBookPath,
    SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    HOST: '127.0.0.1',
  }
  const settings: Record<Component, NodeJS.ProcessEnv> = {
    gateway: {},
    // settlement off: the server wallet's transactions on the devnet are then the swaps (and their approvals) alone
    admin: { ADMIN_API_KEY: adminKey, SETTLEMENT_ENABLED: 'false' },
    trading: {},
    'market-data': {},
    // a dead worker's job goes to another after 5 s (30 s by default)
    agent: { AGENT_ACK_WAIT_MS: '5000' },
    // a dead scheduler's run is resumed after 6 s (120 s by default); 2 s intervals
    automation: { AUTOMATION_MIN_INTERVAL_MS: '2000', AUTOMATION_TICK_MS: '250', AUTOMATION_LEASE_MS: '6000' },
  }
  const servicePorts = await freePorts(20)
  const service = (name: string, component: Component, extra: NodeJS.ProcessEnv = {}) => {
    const port = servicePorts.shift()!
    return spawnProc(
      name,
      component,
      `services/${component}/src/server.ts`,
      { ...base, ...settings[component], PORT: String(port), ...extra },
      `http://127.0.0.1:${port}`,
    )
  }

  say('starting the first replica of each service (migrations)')
  await waitReady(service('admin-1', 'admin'))
  const firsts = [
    service('trading-1', 'trading'),
    service('market-data-1', 'market-data'),
    service('agent-api-1', 'agent', { AGENT_ROLE: 'api' }),
    service('automation-api-1', 'automation', { AUTOMATION_SCHEDULER: 'false' }),
  ]
  await Promise.all(firsts.map((p) => waitReady(p)))
  say('starting the other replicas, 2 agent workers and 3 automation schedulers')
  const rest = [
    service('admin-2', 'admin'),
    service('trading-2', 'trading'),
    service('market-data-2', 'market-data'),
    service('agent-api-2', 'agent', { AGENT_ROLE: 'api' }),
    service('automation-api-2', 'automation', { AUTOMATION_SCHEDULER: 'false' }),
  ]
  const workers = [1, 2].map((i) => service(`agent-worker-${i}`, 'agent', { AGENT_ROLE: 'worker' }))
  const schedulers = [1, 2, 3].map((i) => service(`automation-scheduler-${i}`, 'automation', { AUTOMATION_SCHEDULER: 'true' }))
  await Promise.all([...rest, ...workers, ...schedulers].map((p) => waitReady(p)))

  // each pair of replicas behind a front of its own, as a Kubernetes Service: the gateway knows one URL a service
  const fronts: Record<string, Front> = {}
  for (const component of ['admin', 'trading', 'market-data', 'agent', 'automation'] as const) {
    const replicas = procs.filter((p) => p.component === component && !/worker|scheduler/.test(p.name))
    fronts[component] = await startFront(component, replicas.map(backendOf))
  }
  const gatewayPorts = await freePorts(4)
  const gateways = [0, 1].map((i) => {
    const [port, ops] = [gatewayPorts[2 * i]!, gatewayPorts[2 * i + 1]!]
    const env = {
      ...base,
      PORT: String(port),
      OPS_PORT: String(ops),
      OPS_HOST: '127.0.0.1',
      ADMIN_URL: fronts.admin!.url,
      AGENT_URL: fronts.agent!.url,
      TRADING_URL: fronts.trading!.url,
      MARKET_DATA_URL: fronts['market-data']!.url,
      AUTOMATION_URL: fronts.automation!.url,
      PAY_TO: payTo,
      // one client address (the front) and a few payers send everything
      RATE_LIMIT_READONLY: '1000000',
      RATE_LIMIT_READWRITE: '1000000',
      PAID_RATE_LIMIT_PER_ADDRESS: '1000000',
      PAID_RATE_LIMIT_PER_PAYER: '1000000',
      MAX_CONCURRENT_PER_ADDRESS: '100000',
    }
    return spawnProc(`gateway-${i + 1}`, 'gateway', 'gateway/src/server.ts', env, `http://127.0.0.1:${port}`, `http://127.0.0.1:${ops}`)
  })
  await Promise.all(gateways.map((g) => waitReady(g)))
  const front = await startFront('gateway', gateways.map(backendOf))
  cleanups.push(() => {
    front.close()
    for (const f of Object.values(fronts)) f.close()
  })
  say(`fleet ready: ${procs.length} processes; the front at ${front.url}`)
  return { adminKey, payTo, front, fronts: [front, ...Object.values(fronts)], gateways, workers, schedulers }
}

interface Clients {
  ctx: LoadContext
  /** deletes the automations (after the load) */
  stopAutomations(): Promise<void>
}

/** Keys for the keyed load, 4 automations buying ARB every 3 s, and x402 payments signed as they are sent (devnet accounts 1-4 in turn). */
async function prepareClients({ devnet }: Infrastructure, { adminKey, payTo, front }: Fleet): Promise<Clients> {
  const call = async (path: string, method: string, body: unknown, key = adminKey) => {
    const res = await fetch(`${front.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    })
    const answer = (await res.json()) as any
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(answer)}`)
    return answer
  }
  // quotes need readwrite; several keys, as several clients (one key may have 64 requests in flight)
  const loadKeys: string[] = []
  for (let i = 0; i < 8; i++)
    loadKeys.push((await call('/admin/keys', 'POST', { tier: 'readwrite', label: `rehearsal load ${i}` })).key as string)
  const wallet = devnet.accounts[5]!.address
  const ownerKey = (await call('/admin/keys', 'POST', { tier: 'readwrite', label: 'rehearsal automations', wallet })).key as string
  const automations: string[] = []
  for (let i = 0; i < 4; i++) {
    const config = { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '3s' }
    const made = await call(
      '/automations',
      'POST',
      { walletAddress: wallet, type: 'recurring-buy', name: `rehearsal ${i}`, config },
      ownerKey,
    )
    automations.push(made.automation.id)
  }

  const usdc = devnet.book.tokens.find((t) => t.symbol === 'USDC')!.address
  const payers = devnet.accounts.slice(1, 5).map((a) => ({ address: a.address, privateKey: a.privateKey }))
  let paid = 0
  const signPayment = () => {
    const now = BigInt(Math.floor(Date.now() / 1000))
    const payer = payers[paid++ % payers.length]!
    const [header] = signPayments({
      count: 1,
      payers: [payer],
      payTo,
      usdc,
      chainId: devnet.chainId,
      value: 10_000n,
      validAfter: now - 60n,
      validBefore: now + 600n,
    })
    const { nonce, from } = (
      JSON.parse(Buffer.from(header!, 'base64').toString()) as { payload: { authorization: { nonce: string; from: string } } }
    ).payload.authorization
    return { header: header!, nonce, payer: from.toLowerCase() }
  }
  return {
    ctx: { front: front.url, loadKeys, signPayment },
    stopAutomations: async () => {
      for (const id of automations) await call(`/automations/${id}`, 'DELETE', undefined, ownerKey).catch(() => undefined)
    },
  }
}

interface Faults {
  lines: string[]
  /** the job the killed worker was running */
  workerJob: string
  /** the run the killed scheduler was running */
  schedulerRun: string
  /** under Sentinel: what the Redis primary's SIGKILL did */
  redisFailover?: RedisFailover
  postgresRestart: PostgresRestart
}

interface PostgresRestart {
  downAt: number
  upAt: number
  /** the payments (nonces) and jobs recorded before the crash: every one must still be there after */
  paymentsBefore: string[]
  jobsBefore: string[]
  /** each live service process's time from Postgres back to /ready answering 200 again (undefined: not within 60 s) */
  readyAgainMs: Map<string, number | undefined>
}

interface RedisFailover {
  killedAt: number
  /** the ports of the killed primary and of the replica promoted, and how long the promotion took */
  first: number
  promoted: number
  promotedMs: number
  /** the rate-limit counts on the primary just before the kill, of windows with 10 s or more left, and on the promoted one */
  counts: Map<string, number>
  countsAfter: Map<string, number>
}

/** The gateways' rate-limit counts (ats-rl:…) on the primary now, of windows with 10 s or more left. */
const rateLimitCounts = (redis: SentinelRedis) =>
  redis.onPrimary(async (client) => {
    const counts = new Map<string, number>()
    for await (const keys of client.scanStream({ match: 'ats-rl:*', count: 500 })) {
      for (const key of keys as string[]) {
        const [count, ttl] = await Promise.all([client.get(key), client.pttl(key)])
        if (count !== null && ttl > 10_000) counts.set(key, Number(count))
      }
    }
    return counts
  })

/** The faults, one at a time, each held FAULT_HOLD_MS with the load running; `phase` labels what the load sees. */
async function injectFaults({ cluster, redis, postgres }: Infrastructure, { gateways, workers, schedulers }: Fleet): Promise<Faults> {
  const lines: string[] = []
  const fault = (line: string) => {
    lines.push(`${elapsed()}: ${line}`)
    say(line)
  }
  const hold = async (name: string, during: () => Promise<void>) => {
    phase = name
    await during()
    await sleep(FAULT_HOLD_MS)
    phase = 'steady'
  }

  // a NATS node, SIGKILL: the leader of the payments stream; back after FAULT_HOLD_MS
  await hold('nats-node-killed', async () => {
    const payments = (await streamsOf(cluster)).find((s) => s.name === `${NAMESPACE}_payments`)
    const node = Math.max(0, cluster.names.indexOf(payments?.leader ?? ''))
    await cluster.kill(node)
    fault(`SIGKILL NATS node ${cluster.names[node]} (leader of stream ${payments?.name})`)
    await sleep(FAULT_HOLD_MS)
    await cluster.restart(node)
    fault(`NATS node ${cluster.names[node]} started again; the cluster is whole`)
  })

  await hold('gateway-killed', async () => {
    await killProc(gateways[1]!)
    fault('SIGKILL gateway-2 (left dead)')
  })

  let workerJob = ''
  await hold('worker-killed', async () => {
    workerJob = await killMidWork(workers[1]!, [workers[0]!], async (since) => {
      const [row] = await q<{ id: string }>(`SELECT id FROM agent.jobs WHERE status = 'running' AND updated_at > $1 LIMIT 1`, [since])
      return row?.id
    })
    fault(`SIGKILL agent-worker-2 while it ran job ${workerJob} (left dead)`)
  })

  let schedulerRun = ''
  await hold('scheduler-killed', async () => {
    schedulerRun = await killMidWork(schedulers[2]!, schedulers.slice(0, 2), async (since) => {
      const [row] = await q<{ id: string }>(
        `SELECT id FROM automation.automation_runs WHERE status = 'running' AND started_at > $1 LIMIT 1`,
        [since],
      )
      return row?.id
    })
    fault(`SIGKILL automation-scheduler-3 while it ran automation run ${schedulerRun} (left dead)`)
  })

  // Postgres crashed (immediate shutdown: every connection cut, crash recovery at the start) and
  // started again after POSTGRES_DOWN_MS, as a restart or a managed failover does
  let postgresRestart: PostgresRestart | undefined
  await hold('postgres-restart', async () => {
    const [payments, jobs] = await Promise.all([
      q<{ nonce: string }>('SELECT lower(nonce) AS nonce FROM admin.payments'),
      q<{ id: string }>('SELECT id FROM agent.jobs'),
    ])
    fault(`Postgres crashed (immediate shutdown, under load); down for ${POSTGRES_DOWN_MS / 1000} s`)
    const { downAt, upAt } = await postgres.crashAndRestart(POSTGRES_DOWN_MS)
    fault(`Postgres started again (crash recovery) after ${((upAt - downAt) / 1000).toFixed(1)} s`)
    const live = procs.filter((p) => !p.killedOnPurpose && alive(p.child))
    const readyAgainMs = new Map(
      await Promise.all(
        live.map(async (p) => {
          const ready = await until(
            `${p.name} ready`,
            async () =>
              (await fetch(`${p.readyUrl}/ready`, { signal: AbortSignal.timeout(2000) }).then(
                (r) => r.ok,
                () => false,
              ))
                ? true
                : undefined,
            60_000,
            100,
          ).then(
            () => Date.now() - upAt,
            () => undefined,
          )
          return [p.name, ready] as const
        }),
      ),
    )
    const slowest = Math.max(...[...readyAgainMs.values()].map((ms) => ms ?? Number.POSITIVE_INFINITY))
    fault(`every service process ready again ${(slowest / 1000).toFixed(1)} s after Postgres came back`)
    postgresRestart = {
      downAt,
      upAt,
      paymentsBefore: payments.map((r) => r.nonce),
      jobsBefore: jobs.map((r) => r.id),
      readyAgainMs,
    }
  })

  let redisFailover: RedisFailover | undefined
  if ('sentinels' in redis) {
    await hold('redis-failover', async () => {
      const first = await redis.primaryPort()
      const counts = await rateLimitCounts(redis)
      await redis.kill(first)
      const killedAt = Date.now()
      fault(`SIGKILL the Redis primary :${first} (under paid and keyed load)`)
      const promoted = await until(
        'the sentinels to promote a replica',
        async () => {
          const now = await redis.primaryPort()
          return now === first ? undefined : now
        },
        30_000,
        100,
      )
      const promotedMs = Date.now() - killedAt
      fault(`the sentinels promoted the replica :${promoted}, ${(promotedMs / 1000).toFixed(1)} s after the kill`)
      const countsAfter = await rateLimitCounts(redis)
      await sleep(REDIS_DOWN_MS)
      await redis.restart(first)
      fault(`the old primary :${first} started again (empty), a replica of :${promoted}`)
      redisFailover = { killedAt, first, promoted, promotedMs, counts, countsAfter }
      phase = 'after-redis'
    })
    return { lines, workerJob, schedulerRun, postgresRestart: postgresRestart!, ...(redisFailover ? { redisFailover } : {}) }
  }
  await hold('redis-down', async () => {
    await redis.kill()
    fault(`SIGKILL Redis; down for ${REDIS_DOWN_MS / 1000} s`)
    await sleep(REDIS_DOWN_MS)
    await redis.start()
    fault('Redis started again (empty: it keeps nothing on disk)')
    phase = 'after-redis'
  })
  return { lines, workerJob, schedulerRun, postgresRestart: postgresRestart! }
}

const count = async (sql: string) => (await q<{ n: number }>(sql))[0]!.n

/** Waits (bounded) until every job and run has ended and every charge answered 2xx is in the ledger. */
async function settle(charged: number): Promise<void> {
  say('waiting for every job and run to end and every charge to be recorded')
  const waits: Array<[string, string, (n: number) => boolean, number]> = [
    [
      'jobs to end',
      `SELECT count(*)::int AS n FROM agent.jobs WHERE status NOT IN ('complete', 'failed', 'cancelled')`,
      (n) => n === 0,
      90_000,
    ],
    ['runs to end', `SELECT count(*)::int AS n FROM automation.automation_runs WHERE status = 'running'`, (n) => n === 0, 60_000],
    ['charges to be recorded', 'SELECT count(*)::int AS n FROM admin.payments', (n) => n >= charged, 30_000],
  ]
  for (const [what, sql, done, timeoutMs] of waits) {
    await until(what, async () => (done(await count(sql)) ? true : undefined), timeoutMs, 1000).catch((e: Error) => say(e.message))
  }
  await sleep(2000) // anything late, or twice
}

interface Check {
  name: string
  pass: boolean
  detail: string
  /** lines printed under it */
  more?: string[]
}

/** every answer charged is recorded once, and nothing uncharged is recorded (by payer nonce) */
async function checkCharges(): Promise<Check> {
  const charged = new Set(samples.filter((s) => s.nonce && ok2xx(s)).map((s) => s.nonce!.toLowerCase()))
  const rows = await q<{ nonce: string; n: number }>('SELECT lower(nonce) AS nonce, count(*)::int AS n FROM admin.payments GROUP BY 1')
  const recorded = new Map(rows.map((r) => [r.nonce, r.n]))
  const missing = [...charged].filter((n) => !recorded.has(n))
  const twice = rows.filter((r) => r.n > 1)
  const bySample = new Map(samples.filter((s) => s.nonce).map((s) => [s.nonce!.toLowerCase(), s]))
  const uncharged = rows.filter((r) => !charged.has(r.nonce))
  const cut = uncharged.filter((r) => bySample.get(r.nonce)?.front === 'cut')
  // a paid request a gateway dropped in flight may have been charged without an answer: counted apart
  const states = await q<{ state: string; n: number }>('SELECT state::text, count(*)::int AS n FROM admin.payments GROUP BY 1 ORDER BY 1')
  return {
    name: 'every answer charged is recorded once, nothing uncharged recorded',
    pass: missing.length === 0 && twice.length === 0 && uncharged.length === 0,
    detail: `${charged.size} paid 2xx answers, ${rows.length} ledger rows (${states.map((s) => `${s.state} ${s.n}`).join(', ')}); missing ${missing.length}, twice ${twice.length}, recorded without a 2xx ${uncharged.length}${cut.length ? ` (${cut.length} of them dropped in flight by a gateway)` : ''}`,
  }
}

/** every job accepted (202) ended once, complete, with its payment's outcome to match */
async function checkJobs(workerJob: string): Promise<Check> {
  const rows = await q<{ id: string; status: string; attempts: number; ends: number; payment_outcome: string | null }>(
    `SELECT j.id, j.status::text, j.attempts, j.payment_outcome,
      (SELECT count(*)::int FROM agent.job_events e WHERE e.job_id = j.id AND e.type = 'status' AND e.data->>'status' IN ('complete', 'failed', 'cancelled')) AS ends
     FROM agent.jobs j`,
  )
  const byId = new Map(rows.map((r) => [r.id, r]))
  const accepted = new Set(samples.filter((s) => s.jobId).map((s) => s.jobId!))
  const statusOf = (id: string) => byId.get(id)?.status ?? 'lost'
  const lost = [...accepted].filter((id) => !byId.has(id))
  const notComplete = [...accepted].filter((id) => byId.has(id) && statusOf(id) !== 'complete')
  const endedTwice = rows.filter((r) => r.ends > 1)
  const outcomeWrong = rows.filter((r) => (r.status === 'complete' ? r.payment_outcome !== 'charge' : r.payment_outcome !== 'void'))
  const unaccepted = rows.filter((r) => !accepted.has(r.id))
  const victim = byId.get(workerJob)
  const statuses = [...new Set([...accepted].map(statusOf))].map((s) => `${s} ${[...accepted].filter((id) => statusOf(id) === s).length}`)
  return {
    name: 'every job accepted completes exactly once',
    pass:
      lost.length === 0 &&
      notComplete.length === 0 &&
      endedTwice.length === 0 &&
      outcomeWrong.length === 0 &&
      victim?.status === 'complete',
    detail: `${accepted.size} jobs accepted (${statuses.join(', ')}); ended twice ${endedTwice.length}; payment outcome not matching ${outcomeWrong.length}; ${unaccepted.length} jobs whose 202 was cut; the killed worker's job ${workerJob}: ${victim?.status ?? 'missing'} after ${victim?.attempts ?? 0} runs`,
    more: notComplete.slice(0, 5).map((id) => `not complete: ${id} (${statusOf(id)})`),
  }
}

type Execution = { id: string; tx_hash: string | null; idempotency_key: string | null; automation_run_id: string | null }
const executionsOf = () => q<Execution>('SELECT id, tx_hash, idempotency_key, automation_run_id FROM trading.executions')

/** each automation's due time ran once, each run made one swap at most, none is left running */
async function checkRuns(schedulerRun: string, executions: Execution[]): Promise<Check> {
  const runs = await q<{ id: string; due: string; status: string; tx_hash: string | null; attempts: number }>(
    `SELECT id, automation_id || '@' || scheduled_for::text AS due, status::text, tx_hash, attempts FROM automation.automation_runs`,
  )
  const dues = new Map<string, number>()
  for (const r of runs) dues.set(r.due, (dues.get(r.due) ?? 0) + 1)
  const swapsOf = new Map<string, Execution[]>()
  for (const e of executions) if (e.automation_run_id) swapsOf.set(e.automation_run_id, [...(swapsOf.get(e.automation_run_id) ?? []), e])
  const dueTwice = [...dues.values()].filter((n) => n > 1).length
  const twice = runs.filter((r) => (swapsOf.get(r.id)?.length ?? 0) > 1)
  const running = runs.filter((r) => r.status === 'running')
  const successWithoutSwap = runs.filter((r) => r.status === 'success' && !swapsOf.get(r.id)?.some((e) => e.tx_hash === r.tx_hash))
  const victim = runs.find((r) => r.id === schedulerRun)
  const statuses = [...new Set(runs.map((r) => r.status))].map((s) => `${s} ${runs.filter((r) => r.status === s).length}`)
  return {
    name: 'every automation run happens once',
    pass:
      runs.length > 0 &&
      dueTwice === 0 &&
      twice.length === 0 &&
      running.length === 0 &&
      successWithoutSwap.length === 0 &&
      victim?.status === 'success',
    detail: `${runs.length} runs (${statuses.join(', ')}); due times run twice ${dueTwice}; runs with two executions ${twice.length}; success without its swap ${successWithoutSwap.length}; left running ${running.length}; the killed scheduler's run ${schedulerRun}: ${victim?.status ?? 'missing'} after ${victim?.attempts ?? 0} tries`,
  }
}

/**
 * Every swap the server wallet sent on chain (its transactions since the load began, those to a
 * token being approvals) is one execution's, and no two executions share one.
 */
async function checkSwaps({ devnet }: Infrastructure, startBlock: number, executions: Execution[]): Promise<Check> {
  const server = devnet.accounts[0]!.address.toLowerCase()
  const tokens = new Set(devnet.book.tokens.map((t) => t.address.toLowerCase()))
  const latest = Number(await rpc<string>(devnet.rpcUrl, 'eth_blockNumber', []))
  const sent: string[] = []
  for (let n = startBlock; n <= latest; n++) {
    const block = await rpc<{ transactions: Array<{ hash: string; from: string; to: string | null }> }>(
      devnet.rpcUrl,
      'eth_getBlockByNumber',
      [`0x${n.toString(16)}`, true],
    )
    for (const tx of block.transactions)
      if (tx.from.toLowerCase() === server && tx.to && !tokens.has(tx.to.toLowerCase())) sent.push(tx.hash.toLowerCase())
  }
  const hashes = new Map<string, number>()
  for (const e of executions) if (e.tx_hash) hashes.set(e.tx_hash.toLowerCase(), (hashes.get(e.tx_hash.toLowerCase()) ?? 0) + 1)
  const keys = new Map<string, number>()
  for (const e of executions) if (e.idempotency_key) keys.set(e.idempotency_key, (keys.get(e.idempotency_key) ?? 0) + 1)
  const stray = sent.filter((h) => !hashes.has(h))
  const shared = [...hashes.values()].filter((n) => n > 1).length
  const keyTwice = [...keys.values()].filter((n) => n > 1).length
  return {
    name: 'no swap is sent twice',
    pass: stray.length === 0 && shared === 0 && keyTwice === 0,
    detail: `${sent.length} swap transactions from the server wallet on chain, ${executions.length} executions (${hashes.size} with a transaction); on chain without an execution ${stray.length}; executions sharing a transaction ${shared}; idempotency keys used twice ${keyTwice}`,
  }
}

/** every answer under load that was not 2xx was a 503 with {error} (requests cut by the gateway's SIGKILL apart), grouped with the reason */
function checkErrors(): Check {
  const underLoad = samples.filter((s) => !s.final)
  const errors = underLoad.filter((s) => !ok2xx(s))
  const cut = errors.filter((s) => s.front === 'cut')
  const answered = errors.filter((s) => s.front !== 'cut')
  const bad = answered.filter((s) => s.status !== 503 || !s.jsonError)
  const groups = new Map<string, number>()
  for (const s of answered) {
    const key = `${s.phase}: ${s.route} ${s.status || 'no answer'} ${s.error?.replace(/0x[0-9a-f]+/gi, '0x…').slice(0, 140) ?? ''}`
    groups.set(key, (groups.get(key) ?? 0) + 1)
  }
  return {
    name: 'error answers during the faults were 503 with {error}',
    pass: bad.length === 0,
    detail: `${underLoad.length} requests under load, ${errors.length} not 2xx: ${answered.length} answered by the fleet (${bad.length} not 503 {error}), ${cut.length} dropped in flight by a gateway (the front answered 502)`,
    more: [
      ...[...groups].sort().flatMap(([key, n]) => [`${n} x ${key}`, `    why: ${whyClosed(key)}`]),
      ...cut.map((s) => `dropped: ${s.phase}: ${s.route} (${s.error})`),
    ],
  }
}

/** the final round all 2xx, no process down that was not killed on purpose, every stream with 3 current copies */
async function checkRecovery({ cluster }: Infrastructure): Promise<Check> {
  const finalRound = samples.filter((s) => s.final)
  const failed = finalRound.filter((s) => !ok2xx(s))
  const dead = procs.filter((p) => !p.killedOnPurpose && !alive(p.child)).map((p) => p.name)
  // a follower that was down catches up within seconds; give it that
  let streams = await streamsOf(cluster)
  for (let i = 0; i < 40 && streams.some((s) => s.replicas !== 3 || !s.current); i++) {
    await sleep(500)
    streams = await streamsOf(cluster)
  }
  const lagging = streams.filter((s) => s.replicas !== 3 || !s.current).map((s) => s.name)
  const failures = [...new Set(failed.map((s) => `${s.route} ${s.status} ${s.error}`))].slice(0, 3)
  return {
    name: 'the fleet recovers without a restart by hand',
    pass: finalRound.length > 0 && failed.length === 0 && dead.length === 0 && lagging.length === 0,
    detail: `final round ${finalRound.length - failed.length}/${finalRound.length} 2xx${failures.length ? ` (${failures.join('; ')})` : ''}; processes down that were not killed: ${dead.length ? dead.join(', ') : 'none'}; ${streams.length} streams with 3 current replicas${lagging.length ? `, not: ${lagging.join(', ')}` : ''}`,
  }
}

/**
 * Under Sentinel, the Redis primary's SIGKILL under load: paid requests answered 2xx again within
 * seconds; every payment answered 2xx still has its nonce claimed on the promoted primary (none
 * was acknowledged by one primary alone), and the last ones before the kill, sent again, are
 * refused; keyed requests went on. Rate-limit counts are reported (not judged): those claimed in
 * the instant before the kill and not yet copied are lost, each window goes on.
 */
async function checkRedisFailover(redis: SentinelRedis, failover: RedisFailover, front: string): Promise<Check> {
  const { killedAt } = failover
  const paid = samples.filter((s) => s.nonce && ok2xx(s))
  // when the first request sent after the kill was answered 2xx (it may have waited for the promotion)
  const firstAfter = (kind: (s: Sample) => boolean) => {
    const answered = samples.filter((s) => kind(s) && ok2xx(s) && s.at >= killedAt).map((s) => s.at + s.ms)
    return answered.length ? Math.min(...answered) - killedAt : undefined
  }
  const resumedPaid = firstAfter((s) => s.kind !== 'keyed')
  const resumedKeyed = firstAfter((s) => s.kind === 'keyed')
  const claimed = await redis.onPrimary((client) =>
    Promise.all(paid.map((s) => client.exists(`ats-x402:${s.payer}:${s.nonce!.toLowerCase()}`))),
  )
  const forgotten = paid.filter((_, i) => claimed[i] === 0)
  // the last payments answered 2xx before the kill, sent again now: each must be refused
  const replayed = paid.filter((s) => s.at < killedAt).slice(-10)
  const statuses = await Promise.all(
    replayed.map(async (s) => (await fetch(`${front}/agent/skills`, { headers: { 'x-payment': s.payment! } })).status),
  )
  const acceptedTwice = statuses.filter((status) => status >= 200 && status < 300).length
  const keyedAfter = samples.filter((s) => s.kind === 'keyed' && s.phase === 'after-redis')
  let carried = 0
  const lost: number[] = []
  for (const [key, before] of failover.counts) {
    const after = failover.countsAfter.get(key)
    if (after !== undefined && after >= before) carried++
    else lost.push(before - (after ?? 0))
  }
  const fmt = (ms: number | undefined) => (ms === undefined ? 'never' : `${(ms / 1000).toFixed(1)} s`)
  return {
    name: 'the Redis primary killed: service resumes, no payment accepted twice, nothing acknowledged lost',
    pass:
      resumedPaid !== undefined &&
      resumedPaid < 15_000 &&
      forgotten.length === 0 &&
      replayed.length > 0 &&
      acceptedTwice === 0 &&
      keyedAfter.length > 0 &&
      keyedAfter.every(ok2xx),
    detail: `promoted :${failover.promoted} ${fmt(failover.promotedMs)} after the kill; a paid request sent after it answered 2xx ${fmt(resumedPaid)} after it, a keyed one ${fmt(resumedKeyed)}; ${paid.length} paid 2xx, nonces no longer claimed ${forgotten.length}; ${replayed.length} paid just before the kill sent again: accepted ${acceptedTwice} (${statuses.join(' ')}); keyed after the failover ${keyedAfter.filter(ok2xx).length}/${keyedAfter.length} 2xx`,
    more: [
      `rate limits: ${failover.counts.size} counts before the kill, ${carried} carried on to the promoted primary${lost.length ? `, ${lost.length} lower by ${lost.join(', ')}` : ''}; each window goes on`,
    ],
  }
}

/**
 * Postgres crashed under load and started again: every service process answers /ready again by
 * itself within seconds; every payment and job recorded before the crash is still there; while
 * it was down, what needs no database went on (the paid edge: x402 checks in Redis and on chain,
 * keys from the gateways' caches, payments to JetStream; market data from its caches) and what
 * needs it answered 503 {error} (judged with every other error by checkErrors).
 */
async function checkPostgresRestart(restart: PostgresRestart): Promise<Check> {
  const [payments, jobs] = await Promise.all([
    q<{ nonce: string }>('SELECT lower(nonce) AS nonce FROM admin.payments'),
    q<{ id: string }>('SELECT id FROM agent.jobs'),
  ])
  const paymentsNow = new Set(payments.map((r) => r.nonce))
  const jobsNow = new Set(jobs.map((r) => r.id))
  const lostPayments = restart.paymentsBefore.filter((n) => !paymentsNow.has(n)).length
  const lostJobs = restart.jobsBefore.filter((id) => !jobsNow.has(id)).length
  const notReady = [...restart.readyAgainMs].filter(([, ms]) => ms === undefined).map(([name]) => name)
  const slowest = Math.max(0, ...[...restart.readyAgainMs.values()].map((ms) => ms ?? 0))
  // sent while Postgres was down, by kind
  const during = samples.filter((s) => s.at >= restart.downAt && s.at < restart.upAt)
  const by = (kind: Sample['kind']) => {
    const of = during.filter((s) => s.kind === kind)
    return { all: of.length, ok: of.filter(ok2xx).length }
  }
  const [paidRead, keyed, prompt] = [by('paidRead'), by('keyed'), by('prompt')]
  return {
    name: 'Postgres crashed and restarted: every service reconnects by itself, nothing recorded is lost, the paid edge answers',
    pass:
      restart.readyAgainMs.size > 0 &&
      notReady.length === 0 &&
      slowest < 30_000 &&
      lostPayments === 0 &&
      lostJobs === 0 &&
      paidRead.all > 0 &&
      paidRead.ok === paidRead.all,
    detail: `${restart.readyAgainMs.size} service processes ready again within ${(slowest / 1000).toFixed(1)} s of Postgres back${notReady.length ? ` (not: ${notReady.join(', ')})` : ''}; recorded before the crash and still there: ${restart.paymentsBefore.length - lostPayments}/${restart.paymentsBefore.length} payments, ${restart.jobsBefore.length - lostJobs}/${restart.jobsBefore.length} jobs`,
    more: [
      `sent while it was down (${((restart.upAt - restart.downAt) / 1000).toFixed(1)} s): paid reads ${paidRead.ok}/${paidRead.all} 2xx, keyed reads ${keyed.ok}/${keyed.all} 2xx, paid prompts ${prompt.ok}/${prompt.all} 2xx (a job is written to the agent's database: 503 until it is back)`,
    ],
  }
}

function printHeader(faults: Faults, fleet: Fleet) {
  const underLoad = samples.filter((s) => !s.final).length
  out('')
  out(`Scale rehearsal (pnpm rehearse), ${new Date().toISOString()}`)
  out(
    'fleet: 3 NATS nodes (JETSTREAM_REPLICAS=3), 2 gateways behind a round-robin front, 2 x admin/trading/market-data/agent API/automation API,',
  )
  out(
    `       2 agent workers, 3 automation schedulers, Postgres (the run's own server), ${SENTINEL ? 'Redis under Sentinel (primary, 2 replicas, 3 sentinels)' : 'Redis (one server)'}, devnet; ${procs.length} service processes, each component with its own NATS user and Postgres role; admin settlement off`,
  )
  out(
    `load: ${RATE.prompt} paid prompts/s + ${RATE.paidRead} paid reads/s (x402) + ${RATE.keyed} keyed reads/s; 4 automations every 3 s; ${underLoad} requests under load, ${samples.length - underLoad} in the final round`,
  )
  out('faults:')
  for (const line of faults.lines) out(`  ${line}`)
  const own = fleet.fronts.filter((f) => f.own.size > 0).map((f) => `${f.name}: ${[...f.own].map(([why, n]) => `${why} ${n}`).join(', ')}`)
  out(
    `the fronts' own doings (retried: a GET asked again of the other replica after a reset; cut: dropped in flight, 502): ${own.length ? own.join('; ') : 'none'}`,
  )
  out('latency by phase (ms, every route):')
  for (const name of [...new Set(samples.map((s) => s.phase))]) {
    const of = samples.filter((s) => s.phase === name)
    const ms = of.map((s) => s.ms).sort((a, b) => a - b)
    const at = (p: number) => Math.round(ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]!)
    out(
      `  ${name.padEnd(17)} ${String(of.length).padStart(5)} requests, ${String(of.filter(ok2xx).length).padStart(5)} 2xx, p50 ${at(0.5)}, p99 ${at(0.99)}, max ${at(1)}`,
    )
  }
}

async function main(): Promise<boolean> {
  runDir = mkdtempSync(join(tmpdir(), 'rehearse-'))
  say(`logs: ${runDir}`)
  const infra = await startInfrastructure()
  const fleet = await startFleet(infra)
  const { ctx, stopAutomations } = await prepareClients(infra, fleet)
  // the server wallet's transactions from here on are the rehearsal's
  const startBlock = Number(await rpc<string>(infra.devnet.rpcUrl, 'eth_blockNumber', []))

  say(`load: ${RATE.prompt} paid prompts/s, ${RATE.paidRead} paid reads/s, ${RATE.keyed} keyed reads/s; 4 automations buying every 3 s`)
  const loads = [steady(ctx, 'prompt', RATE.prompt), steady(ctx, 'paidRead', RATE.paidRead), steady(ctx, 'keyed', RATE.keyed)]
  await sleep(FAULT_HOLD_MS)
  const faults = await injectFaults(infra, fleet)
  const skipped = (await Promise.all(loads.map((l) => l.stop()))).reduce((a, b) => a + b, 0)
  say(`load stopped: ${samples.length} requests${skipped ? ` (${skipped} not sent: 200 in flight)` : ''}`)

  // recovery: a final round, nobody restarted by hand
  phase = 'final'
  for (let i = 0; i < 10; i++)
    await Promise.all([send(ctx, 'prompt', true), send(ctx, 'paidRead', true), send(ctx, 'keyed', true), send(ctx, 'keyed', true)])
  await stopAutomations()
  await settle(samples.filter((s) => s.nonce && ok2xx(s)).length)
  writeFileSync(join(runDir, 'samples.json'), JSON.stringify(samples))

  printHeader(faults, fleet)
  const executions = await executionsOf()
  const checks = [
    await checkCharges(),
    await checkJobs(faults.workerJob),
    await checkRuns(faults.schedulerRun, executions),
    await checkSwaps(infra, startBlock, executions),
    checkErrors(),
    await checkRecovery(infra),
    await checkPostgresRestart(faults.postgresRestart),
    ...('sentinels' in infra.redis && faults.redisFailover
      ? [await checkRedisFailover(infra.redis, faults.redisFailover, fleet.front.url)]
      : []),
  ]
  out('')
  for (const c of checks) {
    out(`${c.pass ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}`)
    for (const line of c.more ?? []) out(`        ${line}`)
  }
  out('')
  const passed = checks.every((c) => c.pass)
  out(
    `${passed ? 'every check passed' : `${checks.filter((c) => !c.pass).length} check(s) failed`}; total time ${elapsed()}; logs in ${runDir}`,
  )
  if (process.env.REHEARSE_REPORT) writeFileSync(process.env.REHEARSE_REPORT, `${report.join('\n')}\n`)
  return passed
}

let passed = false
try {
  passed = await main()
} catch (error) {
  process.stderr.write(`rehearsal stopped: ${(error as Error).stack ?? error}\n`)
} finally {
  await Promise.all(procs.map((p) => killProc(p, 'SIGTERM').catch(() => undefined)))
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup()
    } catch (error) {
      process.stderr.write(`cleanup failed: ${(error as Error).message}\n`)
    }
  }
}
process.exit(passed ? 0 : 1)
