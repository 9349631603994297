import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { createServer } from 'node:net'
import { readdirSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

/**
 * Starting the processes a bench measures, for every bench: each server is a process of its own,
 * run with tsx from the repository root. Where `taskset` exists, `pinLoadGenerator()` pins the
 * bench process (the load generator) to core 0 and every server started afterwards goes to core 1,
 * so the two sides do not steal each other's time.
 */

export const root = fileURLToPath(new URL('..', import.meta.url))

const LOAD_CORE = '0'
const SERVER_CORE = '1'

let pinned = false

/** Pins this process, every thread of it, to core 0 and later servers to core 1; false where taskset is missing or refuses. */
export function pinLoadGenerator(): boolean {
  pinned = spawnSync('taskset', ['-a', '-cp', LOAD_CORE, String(process.pid)], { stdio: 'ignore' }).status === 0
  return pinned
}

/**
 * Moves a process already running (every thread of it) to the servers' core: one a library
 * started, such as the devnet's anvil. False when the load generator is not pinned or taskset refuses.
 */
export function pinToServerCore(pid: number): boolean {
  return pinned && spawnSync('taskset', ['-a', '-cp', SERVER_CORE, String(pid)], { stdio: 'ignore' }).status === 0
}

/** The pids of this process's children whose name (as in /proc/<pid>/stat) is `name`. */
export function childrenNamed(name: string): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const close = stat.lastIndexOf(')')
      const ppid = Number(stat.slice(close + 2).split(' ')[1])
      if (ppid === process.pid && stat.slice(stat.indexOf('(') + 1, close) === name) found.push(Number(entry))
    } catch {} // gone meanwhile
  }
  return found
}

const children: ChildProcess[] = []
process.on('exit', () => {
  for (const c of children) c.kill('SIGTERM')
})

export interface Started {
  pid: number
  /** what the process printed as its first line, when it was started with stdout 'pipe' */
  address: string
  /** set when the process has exited: what it said on stderr */
  exited?: string
}

/**
 * Starts `node --import tsx script` (on the servers' core when pinned).
 * `stdout`: 'pipe' when the process prints its address first (resolves with it), else a file
 * descriptor or 'ignore' (resolves at once).
 */
export function start(script: string, env: NodeJS.ProcessEnv, stdout: 'pipe' | 'ignore' | number): Promise<Started> {
  const command = [process.execPath, '--import', 'tsx', script]
  const [file, ...args] = pinned ? ['taskset', '-c', SERVER_CORE, ...command] : command
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

/** Stops every process started here and waits until they are gone. */
export async function stopAll(): Promise<void> {
  for (const c of children) c.kill('SIGTERM')
  await Promise.all(
    children.map((c) => new Promise((resolve) => (c.exitCode === null && c.signalCode === null ? c.once('exit', resolve) : resolve(null)))),
  )
}

/**
 * Waits (up to a minute) until `${url}/ready` answers 2xx for one of `urls` (a server with its
 * /ready on an operational port of its own, or on its public one).
 */
export async function ready(urls: string | string[], server?: Started): Promise<void> {
  const list = typeof urls === 'string' ? [urls] : urls
  const answers = (url: string) =>
    fetch(`${url}/ready`).then(
      (res) => res.ok,
      () => false,
    )
  for (let i = 0; i < 240; i++) {
    // a server that died while starting: say why at once instead of waiting a minute
    if (server?.exited) throw new Error(`${list.join(' or ')} never became ready: ${server.exited}`)
    if ((await Promise.all(list.map(answers))).some(Boolean)) return
    await new Promise((r) => setTimeout(r, 250))
  }
  throw new Error(`${list.join(' or ')} never became ready`)
}

/** Throws when something already listens on the port: the bench would measure (or talk to) it instead. */
export function assertPortFree(port: number, hint = ''): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', (error: NodeJS.ErrnoException) =>
      reject(new Error(`port ${port} is in use (${error.code}): a leftover bench process?${hint ? ` ${hint}` : ''}`)),
    )
    server.listen(port, '127.0.0.1', () => server.close(() => resolve()))
  })
}

/** CPU time (user + system, µs) a process has used so far, from /proc; NaN where unreadable. */
export function cpuMicros(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100
  } catch {
    return Number.NaN
  }
}

/** CPU time (user + system, µs) used so far by every process named `name` (as in /proc/<pid>/stat), e.g. all of Postgres's backends. */
export function cpuMicrosNamed(name: string): number {
  let ticks = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const close = stat.lastIndexOf(')')
      if (stat.slice(stat.indexOf('(') + 1, close) !== name) continue
      const fields = stat.slice(close + 2).split(' ')
      ticks += Number(fields[11]) + Number(fields[12])
    } catch {} // gone meanwhile
  }
  return (ticks * 1e6) / 100
}
