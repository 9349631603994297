// The rehearsals' infrastructure, all of the run's own: a 3-node NATS cluster that knows only
// the components' users, Redis (under Sentinel, or one server), a Postgres server, a devnet;
// and the cleanups that stop it all. Shared by scripts/rehearse.ts and scripts/rehearseUpgrade.ts.
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fleetAccess, type FleetAccess } from '@ats/fleet/access'
import { fleetMembers } from '@ats/fleet'
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
import { startDevnet, type Devnet } from '../../packages/devnet/src/index.ts'
import { pg, say, useDatabase } from './books.ts'
import { alive, killProc, processSettings, procs } from './processes.ts'

/** what stops the run's infrastructure, in the order it was started (run in reverse) */
export const cleanups: Array<() => unknown> = []

let stopping: Promise<void> | undefined
/** Stops every process (SIGTERM), then the infrastructure; once, however often it is called. */
export const stopEverything = () =>
  (stopping ??= (async () => {
    await Promise.all(procs.map((p) => killProc(p, 'SIGTERM').catch(() => undefined)))
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup()
      } catch (error) {
        process.stderr.write(`cleanup failed: ${(error as Error).message}\n`)
      }
    }
  })())

/**
 * Runs a rehearsal's `main`, then stops everything it started, also when it throws or is
 * interrupted (Ctrl-C: SIGINT; SIGTERM), and exits: 0 when it passed, 1 when not, 130 when
 * interrupted.
 */
export async function runRehearsal(main: () => Promise<boolean>): Promise<never> {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      process.stderr.write(`${signal}: stopping everything the rehearsal started\n`)
      void stopEverything().finally(() => process.exit(130))
    })
  }
  let passed = false
  try {
    passed = await main()
  } catch (error) {
    process.stderr.write(`rehearsal stopped: ${(error as Error).stack ?? error}\n`)
  } finally {
    await stopEverything()
  }
  process.exit(passed ? 0 : 1)
}

// ---------------------------------------------------------------------------------------------
// Redis of the rehearsal's own (the machine's, on 6379, is shared: never killed)
// ---------------------------------------------------------------------------------------------

export interface PrivateRedis {
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
// The infrastructure
// ---------------------------------------------------------------------------------------------

export interface Infrastructure<R extends PrivateRedis | SentinelRedis = PrivateRedis | SentinelRedis> {
  cluster: NatsCluster
  /** every node's client URL, comma-separated, as NATS_URL takes them */
  natsUrls: string
  namespace: string
  redis: R
  /** the run's own Postgres server (it may be crashed and started again under load) */
  postgres: PrivatePostgres
  databaseUrl: string
  devnet: Devnet
  access: FleetAccess
}

/**
 * A Redis (under Sentinel: a primary, 2 replicas, 3 sentinels; else one server), a Postgres
 * server and a devnet of the run's own; each component's NATS user and Postgres role (each
 * process started by spawnProc gets its component's); then the cluster, which knows only those
 * users. The checks' database pool is the superuser's.
 */
export async function startInfrastructure<S extends boolean>({
  runDir,
  namespace,
  sentinel,
}: {
  runDir: string
  namespace: string
  sentinel: S
}): Promise<Infrastructure<S extends true ? SentinelRedis : PrivateRedis>> {
  const ports = await freePorts(2)
  /** each is stopped at the end as soon as it is up: an interrupt while the others start leaves none behind */
  const stoppedAtEnd = <T extends { stop(): Promise<unknown> }>(started: Promise<T>) =>
    started.then((it) => {
      cleanups.push(() => it.stop())
      return it
    })
  const [redis, postgres, devnet, members] = await Promise.all([
    stoppedAtEnd<PrivateRedis | SentinelRedis>(sentinel ? startSentinelRedis({ replicas: 2 }) : startRedis(ports[0]!)),
    stoppedAtEnd(startPrivatePostgres()),
    stoppedAtEnd(startDevnet({ port: ports[1]!, addressBookPath: join(runDir, 'address-book.json') })),
    fleetMembers(),
  ])
  const databaseUrl = postgres.url.replace(/\/postgres$/, '/ats')
  const admin = new pg.Pool({ connectionString: postgres.url, max: 1 })
  await admin.query('CREATE DATABASE ats')
  await admin.end()
  const db = new pg.Pool({ connectionString: databaseUrl, max: 4 })
  // the pool's idle connections are cut when Postgres crashes: the next query opens new ones
  db.on('error', () => undefined)
  useDatabase(db)
  cleanups.push(() => db.end())
  const rolePrefix = `rh${randomBytes(4).toString('hex')}`
  const access = await fleetAccess({ members, namespace, databaseUrl, rolePrefix })
  const cluster = await startNatsCluster({ nodes: 3, timeoutMs: 30_000, authorization: access.natsAuthorization })
  cleanups.push(() => cluster.stop())
  const natsUrls = cluster.urls.join(',')
  processSettings.componentEnv = (component) => access.envOf(component, natsUrls)
  const redisAt =
    'sentinels' in redis
      ? `sentinels ${redis.sentinels} (primary :${redis.ports[0]}, replicas :${redis.ports.slice(1).join(', :')})`
      : redis.url
  say(`NATS cluster ${natsUrls} (one user per component); Redis ${redisAt}; devnet ${devnet.rpcUrl}`)
  say(`Postgres 127.0.0.1:${postgres.port} (the run's own), roles ${access.roles.map((r) => r.role).join(', ')}`)
  return {
    cluster,
    natsUrls,
    namespace,
    redis: redis as S extends true ? SentinelRedis : PrivateRedis,
    postgres,
    databaseUrl,
    devnet,
    access,
  }
}
