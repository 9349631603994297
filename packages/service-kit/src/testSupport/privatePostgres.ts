// A PostgreSQL server of the rehearsal's own on loopback, so that it can be crashed and started
// again under load without touching the machine's shared server: initdb into a temporary
// directory, the postmaster as a child process on a free port, trust auth, deleted at stop.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { freePorts } from '../ports.ts'

export interface PrivatePostgres {
  /** the superuser's URL (database `postgres`) */
  url: string
  port: number
  /**
   * Stops the server as a crash or a failover would (immediate shutdown: no checkpoint, every
   * connection cut, crash recovery at the next start), waits `downMs`, starts it again and
   * resolves once it accepts connections, with when it went down and came back (epoch ms).
   */
  crashAndRestart(downMs: number): Promise<{ downAt: number; upAt: number }>
  /** stops the server and deletes its files */
  stop(): Promise<void>
}

/** The directory of initdb and postgres: PG_BINDIR, pg_config's, or Debian's newest /usr/lib/postgresql/<major>/bin. */
function binDir(): string {
  if (process.env.PG_BINDIR) return process.env.PG_BINDIR
  const fromConfig = spawnSync('pg_config', ['--bindir'], { encoding: 'utf8' })
  const configured = fromConfig.status === 0 ? fromConfig.stdout.trim() : ''
  if (configured && existsSync(join(configured, 'initdb'))) return configured
  const debian = '/usr/lib/postgresql'
  const majors = existsSync(debian) ? readdirSync(debian).filter((v) => /^\d+$/.test(v)) : []
  const newest = majors.sort((a, b) => Number(b) - Number(a)).find((v) => existsSync(join(debian, v, 'bin', 'initdb')))
  if (!newest) throw new Error('PostgreSQL server binaries not found (Debian: apt-get install postgresql; or set PG_BINDIR)')
  return join(debian, newest, 'bin')
}

/**
 * PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user, through
 * setpriv, which execs it (no process in between: a signal to the child is the postmaster's).
 */
const asServerUser = (command: string, args: string[]): [string, string[]] =>
  process.getuid?.() === 0
    ? ['setpriv', ['--reuid=postgres', '--regid=postgres', '--init-groups', '--', command, ...args]]
    : [command, args]

export async function startPrivatePostgres({ maxConnections = 400 } = {}): Promise<PrivatePostgres> {
  const bin = binDir()
  const port = (await freePorts(1))[0]!
  const dir = await mkdtemp(join(tmpdir(), 'ats-postgres-'))
  const data = join(dir, 'data')
  if (process.getuid?.() === 0) {
    spawnSync('chown', ['postgres:', dir])
    await chmod(dir, 0o700)
  }
  const [initdb, initArgs] = asServerUser(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync'])
  const made = spawnSync(initdb, initArgs, { encoding: 'utf8' })
  if (made.status !== 0) throw new Error(`initdb failed: ${made.stderr || made.error?.message}`)

  let server: ChildProcess | undefined
  const url = `postgresql://postgres@127.0.0.1:${port}/postgres`
  const accepting = async (timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 })
      client.on('error', () => undefined)
      try {
        await client.connect()
        await client.query('SELECT 1')
        return
      } catch (error) {
        if (Date.now() > deadline)
          throw new Error(`the private PostgreSQL on ${port} did not accept connections: ${(error as Error).message}`)
        await sleep(100)
      } finally {
        await client.end().catch(() => undefined)
      }
    }
  }
  const start = async () => {
    // durable commits as in production (synchronous_commit on); fsync off: the machine does not crash, the server does
    const [postgres, args] = asServerUser(join(bin, 'postgres'), [
      '-D',
      data,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      `unix_socket_directories=${dir}`,
      '-c',
      `max_connections=${maxConnections}`,
      '-c',
      'fsync=off',
    ])
    server = spawn(postgres, args, { stdio: 'ignore' })
    await accepting(30_000)
  }
  const halt = async (signal: NodeJS.Signals) => {
    const child = server
    if (!child || child.exitCode !== null || child.signalCode !== null) return
    const exited = once(child, 'exit')
    // SIGQUIT is the postmaster's immediate shutdown, SIGINT its fast one
    child.kill(signal)
    await exited
  }

  try {
    await start()
  } catch (error) {
    await halt('SIGINT')
    await rm(dir, { recursive: true, force: true })
    throw error
  }
  return {
    url,
    port,
    async crashAndRestart(downMs) {
      const downAt = Date.now()
      await halt('SIGQUIT')
      await sleep(downMs)
      await start()
      return { downAt, upAt: Date.now() }
    },
    async stop() {
      await halt('SIGINT')
      await rm(dir, { recursive: true, force: true })
    },
  }
}
