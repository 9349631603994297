// A Sentinel-managed Redis on loopback for tests and the rehearsal: a primary, its replicas and
// three sentinels, real processes on free ports, nothing kept on disk.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { portOpen } from '../localInfra.ts'
import { freePorts } from '../ports.ts'

/** Why a Sentinel-managed Redis cannot be started here (redis-server or redis-sentinel missing), or undefined. */
export function redisSentinelMissing(): string | undefined {
  for (const binary of ['redis-server', 'redis-sentinel']) {
    if (spawnSync(binary, ['--version']).error) return `${binary} is not installed (Debian: apt-get install redis-server redis-sentinel)`
  }
  return undefined
}

export interface SentinelRedis {
  /** the sentinels' host:port, comma-separated, as REDIS_SENTINELS takes them */
  sentinels: string
  /** the name the sentinels monitor the primary under (REDIS_SENTINEL_MASTER) */
  master: string
  /** REDIS_URL beside REDIS_SENTINELS (its host and port are not used) */
  url: string
  /** every Redis server's port, the first primary at the start */
  ports: number[]
  /** the port of the primary the sentinels name now */
  primaryPort(): Promise<number>
  /** SIGKILLs the server on `port`, as a crashed machine */
  kill(port: number): Promise<void>
  /** starts the server on `port` again, empty, as a replica of the primary the sentinels name (as a restarted pod does) */
  restart(port: number): Promise<void>
  /** runs `use` with a client of the primary the sentinels name now (closed after) */
  onPrimary<T>(use: (redis: Redis) => Promise<T>): Promise<T>
  /** waits until the sentinels agree on one primary holding `replicas` replicas, each with its link up */
  settled(replicas: number, timeoutMs?: number): Promise<void>
  /** stops every process and deletes the sentinels' files */
  stop(): Promise<void>
}

/**
 * A primary, `replicas` replicas and three sentinels (quorum 2; a primary unanswering for 1 s is
 * down; failover within 5 s), on free loopback ports. Resolves once the sentinels know every
 * replica and each other, so a failover can happen.
 */
export async function startSentinelRedis({ replicas = 2, master = 'ats' } = {}): Promise<SentinelRedis> {
  const missing = redisSentinelMissing()
  if (missing) throw new Error(missing)
  const free = await freePorts(replicas + 4)
  const ports = free.slice(0, replicas + 1)
  const sentinelPorts = free.slice(replicas + 1)
  const dir = await mkdtemp(join(tmpdir(), 'ats-sentinel-'))
  const servers = new Map<number, ChildProcess>()
  const sentinels: ChildProcess[] = []

  const listening = async (port: number, what: string) => {
    for (let i = 0; i < 200; i++) {
      if (await portOpen('127.0.0.1', port)) return
      await sleep(50)
    }
    throw new Error(`${what} did not listen on ${port}`)
  }
  const startServer = async (port: number, primary?: number) => {
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]
    if (primary !== undefined) args.push('--replicaof', '127.0.0.1', String(primary))
    servers.set(port, spawn('redis-server', args, { stdio: 'ignore' }))
    await listening(port, 'redis-server')
  }
  const askSentinel = async <T>(port: number, ...args: string[]): Promise<T> => {
    const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
    client.on('error', () => undefined)
    try {
      await client.connect()
      return (await client.call('SENTINEL', ...args)) as T
    } finally {
      client.disconnect()
    }
  }
  /** a SENTINEL answer of name/value pairs as an object */
  const fields = (flat: string[]) => Object.fromEntries(flat.flatMap((v, i) => (i % 2 === 0 ? [[v, flat[i + 1]]] : [])))
  const primaryPort = async () => {
    for (const port of sentinelPorts) {
      const addr = await askSentinel<[string, string] | null>(port, 'get-master-addr-by-name', master).catch(() => null)
      if (addr) return Number(addr[1])
    }
    throw new Error('no sentinel answers')
  }
  const settled = async (count: number, timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs
    let last = ''
    for (;;) {
      try {
        const views = await Promise.all(
          sentinelPorts.map(async (port) => {
            const [addr, known, peers] = await Promise.all([
              askSentinel<[string, string]>(port, 'get-master-addr-by-name', master),
              askSentinel<string[][]>(port, 'replicas', master),
              askSentinel<string[][]>(port, 'sentinels', master),
            ])
            const up = known
              .map(fields)
              .filter((r) => !/s_down|o_down|disconnected/.test(r.flags ?? '') && r['master-link-status'] === 'ok')
            return { primary: addr[1], up: up.length, peers: peers.length }
          }),
        )
        last = JSON.stringify(views)
        if (views.every((v) => v.primary === views[0]!.primary && v.up >= count && v.peers === sentinelPorts.length - 1)) return
      } catch (error) {
        last = (error as Error).message
      }
      if (Date.now() > deadline) throw new Error(`the sentinels did not settle on a primary with ${count} replicas: ${last}`)
      await sleep(250)
    }
  }
  const kill = async (port: number) => {
    const child = servers.get(port)
    if (!child || child.exitCode !== null || child.signalCode !== null) return
    const exited = once(child, 'exit')
    child.kill('SIGKILL')
    await exited
  }
  const stop = async () => {
    for (const child of [...sentinels, ...servers.values()]) {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = once(child, 'exit')
        child.kill('SIGKILL')
        await exited
      }
    }
    await rm(dir, { recursive: true, force: true })
  }

  try {
    await startServer(ports[0]!)
    await Promise.all(ports.slice(1).map((port) => startServer(port, ports[0]!)))
    for (const port of sentinelPorts) {
      // a sentinel rewrites its file with what it learns: one each
      const file = join(dir, `sentinel-${port}.conf`)
      await writeFile(
        file,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `sentinel monitor ${master} 127.0.0.1 ${ports[0]} 2`,
          `sentinel down-after-milliseconds ${master} 1000`,
          `sentinel failover-timeout ${master} 5000`,
          `sentinel parallel-syncs ${master} ${replicas}`,
          '',
        ].join('\n'),
      )
      sentinels.push(spawn('redis-sentinel', [file], { stdio: 'ignore' }))
      await listening(port, 'redis-sentinel')
    }
    await settled(replicas)
  } catch (error) {
    await stop()
    throw error
  }
  return {
    sentinels: sentinelPorts.map((port) => `127.0.0.1:${port}`).join(','),
    master,
    url: 'redis://127.0.0.1',
    ports,
    primaryPort,
    kill,
    restart: async (port) => startServer(port, await primaryPort()),
    onPrimary: async (use) => {
      const client = new Redis({ host: '127.0.0.1', port: await primaryPort(), lazyConnect: true })
      try {
        await client.connect()
        return await use(client)
      } finally {
        client.disconnect()
      }
    },
    settled,
    stop,
  }
}
