import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, sep } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { natsChannels } from '@ats/contracts'
import { connect } from 'nats'
import pg from 'pg'
import type { TProperties } from 'typebox'
import { createDatabase, type DatabaseClient, type DatabaseOptions } from './database.ts'
import { migrate } from './migrator.ts'
import { createService, type ChainMode, type Service, type ServiceDefinition } from './service.ts'
import { freePort, freePorts } from './ports.ts'
import { localInfra, portOpen } from './localInfra.ts'

/**
 * Test infrastructure: real Postgres, NATS and Redis. Each comes from its
 * environment variable when set (CI sets them), else from the local default
 * port when something answers there, else from a testcontainers container
 * (which needs a Docker engine and says so when there is none).
 */
export interface Infra {
  databaseUrl: string
  natsUrl: string
  redisUrl: string
}

interface Candidate {
  env: string
  local: string
  port: number
  image: string
  containerPort: number
  url: (host: string, port: number) => string
  setup?: (container: import('testcontainers').GenericContainer) => import('testcontainers').GenericContainer
}

const candidates = {
  databaseUrl: {
    env: 'DATABASE_URL',
    local: localInfra.databaseUrl,
    port: 5432,
    image: 'postgres:16-alpine',
    containerPort: 5432,
    url: (host, port) => `postgresql://postgres@${host}:${port}/postgres`,
    setup: (c) => c.withEnvironment({ POSTGRES_HOST_AUTH_METHOD: 'trust' }),
  },
  natsUrl: {
    env: 'NATS_URL',
    local: localInfra.natsUrl,
    port: 4222,
    image: 'nats:2.10-alpine',
    containerPort: 4222,
    url: (host, port) => `nats://${host}:${port}`,
    setup: (c) => c.withCommand(['-js']),
  },
  redisUrl: {
    env: 'REDIS_URL',
    local: localInfra.redisUrl,
    port: 6379,
    image: 'redis:7-alpine',
    containerPort: 6379,
    url: (host, port) => `redis://${host}:${port}`,
  },
} satisfies Record<keyof Infra, Candidate>

async function resolveOne(candidate: Candidate): Promise<string> {
  const fromEnv = process.env[candidate.env]
  if (fromEnv) return fromEnv
  if (await portOpen('127.0.0.1', candidate.port)) return candidate.local
  const { GenericContainer, Wait } = await import('testcontainers')
  try {
    let container = new GenericContainer(candidate.image).withExposedPorts(candidate.containerPort)
    container = (candidate.setup?.(container) ?? container).withWaitStrategy(Wait.forListeningPorts())
    const started = await container.start()
    return candidate.url(started.getHost(), started.getMappedPort(candidate.containerPort))
  } catch (error) {
    throw new Error(
      `no ${candidate.env}: nothing listens on 127.0.0.1:${candidate.port} and no container could start (${(error as Error).message}); set ${candidate.env}`,
    )
  }
}

let infra: Promise<Infra> | undefined

export function testInfra(): Promise<Infra> {
  infra ??= (async () => ({
    databaseUrl: await resolveOne(candidates.databaseUrl),
    natsUrl: await resolveOne(candidates.natsUrl),
    redisUrl: await resolveOne(candidates.redisUrl),
  }))()
  return infra
}

interface Teardown {
  teardown(fn: () => unknown): void
}

/** A new, empty database on the test Postgres; dropped when the test ends. */
export async function freshDatabase(t: Teardown): Promise<string> {
  const { databaseUrl } = await testInfra()
  const name = `ats_test_${randomBytes(6).toString('hex')}`
  const admin = new pg.Client({ connectionString: databaseUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  t.teardown(async () => {
    const client = new pg.Client({ connectionString: databaseUrl })
    await client.connect()
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await client.end()
  })
  const url = new URL(databaseUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** A fresh database with a service's migrations applied (`definition.database`), and its Prisma client on it, closed at teardown. */
export async function migratedDatabase<Db extends DatabaseClient>(
  t: Teardown,
  database: DatabaseOptions<Db>,
): Promise<{ db: Db; url: string }> {
  const url = await freshDatabase(t)
  await migrate(url, { schema: database.schema, dir: database.migrations })
  const db = createDatabase(url, database)
  t.teardown(() => db.$disconnect())
  return { db, url }
}

export const testInternalToken = 'test-internal-token-0123456789'

/**
 * A NATS namespace of the test's own: its services answer only each other, and its payments
 * stream and blocked-payers bucket are deleted when the test ends.
 */
export async function freshNamespace(t: Teardown): Promise<string> {
  const { natsUrl } = await testInfra()
  const namespace = `t${randomBytes(6).toString('hex')}`
  t.teardown(async () => {
    const nc = await connect({ servers: natsUrl })
    const jsm = await nc.jetstreamManager()
    const { payments, events } = natsChannels(namespace).admin
    for (const name of [payments.stream, `KV_${payments.blockedPayers}`, events.streamSpec.name])
      await jsm.streams.delete(name).catch(() => false)
    await nc.close()
  })
  return namespace
}

export async function baseTestEnv(t: Teardown): Promise<NodeJS.ProcessEnv> {
  const { natsUrl } = await testInfra()
  return {
    DATABASE_URL: await freshDatabase(t),
    NATS_NAMESPACE: await freshNamespace(t),
    NATS_URL: natsUrl,
    INTERNAL_TOKEN: testInternalToken,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
    OPS_PORT: '0',
  }
}

/** Builds and listens on a free port; closed when the test ends. */
export async function startService<S extends TProperties, Db extends DatabaseClient = never, Chain extends ChainMode = never>(
  t: Teardown,
  definition: ServiceDefinition<S, Db, Chain>,
  env: NodeJS.ProcessEnv,
): Promise<Service<S, Db, Chain> & { url: string }> {
  const service = await createService(definition, env)
  t.teardown(() => service.close())
  const url = await service.listen()
  return Object.assign(service, { url })
}

/**
 * How to run a package's `src/<name>.ts`: under `pnpm test` (node's ats-dist condition, which
 * the child inherits through NODE_OPTIONS) its compiled `dist/<name>.js` with plain node, as an
 * image runs it and without tsx's loader (~2 s of CPU a process); else the source with tsx.
 */
function entryArgs(entry: string): string[] {
  const at = entry.lastIndexOf(`${sep}src${sep}`)
  const compiled = `${entry.slice(0, at)}${sep}dist${sep}${entry.slice(at + 5).replace(/\.ts$/, '.js')}`
  const underDist = `${process.env.NODE_OPTIONS ?? ''} ${process.execArgv.join(' ')}`.includes('--conditions=ats-dist')
  return underDist && at >= 0 && existsSync(compiled) ? [compiled] : ['--import', 'tsx', entry]
}

/**
 * A service as a process of its own (its server.ts; see entryArgs), for tests about what
 * replicas share: ready when its /ready answers 200, stopped with SIGTERM at teardown.
 */
export async function startServiceProcess(
  t: Teardown,
  entry: string,
  env: NodeJS.ProcessEnv,
  timeoutMs = 60_000,
): Promise<{ url: string; pid: number }> {
  const port = await freePort()
  const child = spawn(process.execPath, entryArgs(entry), {
    env: { ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (chunk) => (stderr += chunk))
  const exited = once(child, 'exit')
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      await exited
    }
  })
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${entry} exited with ${child.exitCode}: ${stderr.slice(-2000)}`)
    const ready = await fetch(`${url}/ready`).then(
      (res) => res.ok,
      () => false,
    )
    if (ready) return { url, pid: child.pid! }
    if (Date.now() > deadline) throw new Error(`${entry} was not ready within ${timeoutMs} ms: ${stderr.slice(-2000)}`)
    await sleep(100)
  }
}

/** The NATS server the cluster tests start (Debian's package puts it here). */
export const natsServerPath = '/usr/sbin/nats-server'

export interface NatsCluster {
  /** each server's client URL (node i answers at urls[i]); join them with commas for NATS_URL */
  urls: string[]
  /** each server's name, as JetStream reports peers and leaders (node i is names[i]) */
  names: string[]
  /** each server's HTTP monitoring base URL (/jsz, /varz), which needs no credentials */
  monitors: string[]
  /** SIGKILLs node i, as a crashed machine: no goodbye to its peers or clients */
  kill(i: number): Promise<void>
  /** starts node i again (after kill) on its ports and store; resolves once every node is back in the JetStream meta cluster */
  restart(i: number): Promise<void>
  /** stops the nodes still running and deletes their stores */
  stop(): Promise<void>
}

/**
 * A real NATS cluster with JetStream on loopback (`natsServerPath`, free ports, a temporary
 * store per node), for what only replication shows: copies on several servers, acks with one
 * of them gone. Resolves once every node sees a JetStream meta leader and all the peers.
 */
export async function startNatsCluster({
  nodes = 3,
  timeoutMs = 15_000,
  authorization,
}: {
  nodes?: number
  timeoutMs?: number
  /** an `authorization { … }` block for every node (clients must then log in as one of its users) */
  authorization?: string
} = {}): Promise<NatsCluster> {
  if (!existsSync(natsServerPath)) throw new Error(`no ${natsServerPath}: install nats-server to start a NATS cluster`)
  const free = await freePorts(3 * nodes)
  const ports = Array.from({ length: nodes }, (_, i) => ({ client: free[3 * i]!, route: free[3 * i + 1]!, monitor: free[3 * i + 2]! }))
  const cluster = `ats-test-${randomBytes(4).toString('hex')}`
  const root = await mkdtemp(join(tmpdir(), `${cluster}-`))
  const names = ports.map((_, i) => `${cluster}-n${i}`)
  const logs = ports.map(() => '')
  const config = join(root, 'authorization.conf')
  if (authorization) await writeFile(config, authorization, { mode: 0o600 })
  const launch = (i: number) => {
    const port = ports[i]!
    const routes = ports.filter((_, j) => j !== i).map((p) => `nats://127.0.0.1:${p.route}`)
    const args = [
      '-a',
      '127.0.0.1',
      '-p',
      String(port.client),
      '-m',
      String(port.monitor),
      '-n',
      names[i]!,
      '-js',
      '-sd',
      join(root, names[i]!),
    ]
    args.push('--cluster_name', cluster, '--cluster', `nats://127.0.0.1:${port.route}`, '--routes', routes.join(','))
    if (authorization) args.push('-c', config)
    const child = spawn(natsServerPath, args, { stdio: ['ignore', 'ignore', 'pipe'] })
    child.stderr!.on('data', (chunk) => (logs[i] = (logs[i] + chunk).slice(-2000)))
    return { child, exited: once(child, 'exit') }
  }
  const children = ports.map((_, i) => launch(i))
  const running = (i: number) => children[i]!.child.exitCode === null && children[i]!.child.signalCode === null
  const end = async (i: number, signal: NodeJS.Signals) => {
    if (!running(i)) return
    children[i]!.child.kill(signal)
    await children[i]!.exited
  }
  const stop = async () => {
    await Promise.all(children.map((_, i) => end(i, 'SIGTERM')))
    await rm(root, { recursive: true, force: true })
  }
  type Meta = { leader?: string; cluster_size?: number; replicas?: Array<{ current?: boolean }> }
  const metaOf = (monitor: number): Promise<Meta | undefined> =>
    fetch(`http://127.0.0.1:${monitor}/jsz`).then(
      async (res) => (res.ok ? ((await res.json()) as { meta_cluster?: Meta }).meta_cluster : undefined),
      () => undefined,
    )
  // every node follows one meta leader, and the leader (the only one that lists its followers)
  // has all of them current: a stream with a copy on every node can be placed
  const formed = (metas: Array<Meta | undefined>) =>
    metas.every((m) => m?.leader && m.leader === metas[0]?.leader && m.cluster_size === nodes) &&
    metas.some((m) => m?.replicas?.length === nodes - 1 && m.replicas.every((r) => r.current))
  const whole = () =>
    eventually(
      `a NATS cluster of ${nodes} with a JetStream meta leader`,
      async () => {
        const dead = children.findIndex((_, i) => !running(i))
        if (dead >= 0) throw new Error(`nats-server ${names[dead]} exited: ${logs[dead]}`)
        return formed(await Promise.all(ports.map((p) => metaOf(p.monitor)))) || undefined
      },
      timeoutMs,
    )
  try {
    await whole()
  } catch (error) {
    await stop()
    throw error
  }
  const restart = async (i: number) => {
    if (running(i)) return
    children[i] = launch(i)
    await whole()
  }
  const monitors = ports.map((p) => `http://127.0.0.1:${p.monitor}`)
  return { urls: ports.map((p) => `nats://127.0.0.1:${p.client}`), names, monitors, kill: (i) => end(i, 'SIGKILL'), restart, stop }
}

/** Polls `check` every 100 ms until it returns a value other than undefined (10 s at most). */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/**
 * One metric's samples on a process's /metrics, keyed by their label values other than the
 * service's, in order and comma-separated (`charged`, `sent,http`; '' without labels).
 */
export async function scrapeMetric(baseUrl: string, name: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text()
  const samples: Record<string, number> = {}
  for (const [, labels = '', value] of text.matchAll(new RegExp(`^${name}(?:\\{(.*)\\})? (\\S+)$`, 'gm'))) {
    const values = [...labels.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].filter(([, label]) => label !== 'service').map(([, , v]) => v)
    samples[values.join(',')] = Number(value)
  }
  return samples
}

export { compareSchemaWithDatabase, parsePrismaSchema } from './testSupport/schemaCheck.ts'
export { createDatabase } from './database.ts'

/**
 * Tracing on for this test process, into memory: every span ends up in the returned exporter
 * at once (a simple processor, no batch delay). Call it before creating services (their loggers
 * and hooks see whether tracing is on when they are made). Once per process: the API keeps the
 * first provider registered.
 */
export async function startTestTracing() {
  const [{ InMemorySpanExporter, SimpleSpanProcessor }, { NodeTracerProvider }, { W3CTraceContextPropagator }, { useTracerProvider }] =
    await Promise.all([
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/core'),
      import('./tracing.ts'),
    ])
  const exporter = new InMemorySpanExporter()
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  provider.register({ propagator: new W3CTraceContextPropagator() })
  useTracerProvider(provider)
  return exporter
}

export { freePort, freePorts } from './ports.ts'

/** Debian's Chromium (apt package chromium; .ci/run installs it), for the browser tests. */
export const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
/** the flags this machine's closed network needs: no background calls to Google's hosts */
export const chromiumArgs = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]
export { redisSentinelMissing, startSentinelRedis, type SentinelRedis } from './testSupport/redisSentinel.ts'
export { startPrivatePostgres, type PrivatePostgres } from './testSupport/privatePostgres.ts'

/** A fetch that keeps the headers of every request it sends (`sent`), for tests of what a client put on the wire. */
export function recordingFetch(): { fetch: typeof fetch; sent: Headers[] } {
  const sent: Headers[] = []
  const recording: typeof fetch = async (input, init) => {
    const request = new Request(input, init)
    sent.push(new Headers(request.headers))
    return fetch(request)
  }
  return { fetch: recording, sent }
}
