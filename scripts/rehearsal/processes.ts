// The rehearsals' processes (each service replica as a child process, its log in the run's
// directory) and the round-robin fronts before them: shared by scripts/rehearse.ts and
// scripts/rehearseUpgrade.ts.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { closeSync, openSync, readFileSync } from 'node:fs'
import {
  Agent,
  createServer as createHttpServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { root } from '@ats/fleet'

export type Component = 'gateway' | 'admin' | 'agent' | 'trading' | 'market-data' | 'automation'

export interface Proc {
  name: string
  component: Component
  child: ChildProcess
  /** where /ready answers */
  readyUrl: string
  /** where clients (the fronts) reach it */
  url: string
  log: string
  /** the checkout its code was started from */
  tree: string
  /** set when the rehearsal stopped it on purpose (killed, or stopped for an upgrade) */
  killedOnPurpose?: boolean
}

/** every process the run started, in order */
export const procs: Proc[] = []

/**
 * The run's directory (logs) and the settings each component's processes get on top of those
 * given to spawnProc (its NATS user and Postgres role): set once by the rehearsal at its start.
 */
export const processSettings: { runDir: string; componentEnv(component: Component): NodeJS.ProcessEnv } = {
  runDir: '',
  componentEnv: () => ({}),
}

export const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null

/** Starts `entry` (a path in `tree`, this checkout by default) with tsx; its output goes to <name>.log. */
export function spawnProc(
  name: string,
  component: Component,
  entry: string,
  env: NodeJS.ProcessEnv,
  url: string,
  readyUrl = url,
  tree = root,
): Proc {
  const log = join(processSettings.runDir, `${name}.log`)
  const fd = openSync(log, 'w')
  const child = spawn(process.execPath, ['--import', 'tsx', join(tree, entry)], {
    cwd: tree,
    env: { ...process.env, ...env, ...processSettings.componentEnv(component) },
    stdio: ['ignore', fd, fd],
  })
  closeSync(fd)
  const proc = { name, component, child, readyUrl, url, log, tree }
  procs.push(proc)
  return proc
}

/** whether `url`/ready answers 200 within 2 s */
export const answersReady = (url: string, timeoutMs = 2000) =>
  fetch(`${url}/ready`, { signal: AbortSignal.timeout(timeoutMs) }).then(
    (r) => r.ok,
    () => false,
  )

export async function waitReady(proc: Proc, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (!alive(proc.child)) throw new Error(`${proc.name} exited while starting: ${readFileSync(proc.log, 'utf8').slice(-1500)}`)
    if (await answersReady(proc.readyUrl)) return
    await sleep(250)
  }
  throw new Error(`${proc.name} was not ready within ${timeoutMs / 1000} s (log: ${proc.log})`)
}

/** Sends `signal` and waits for the exit; a process that does not stop within 15 s is SIGKILLed. */
export async function killProc(proc: Proc, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  proc.killedOnPurpose = true
  if (!alive(proc.child)) return
  const exited = once(proc.child, 'exit')
  proc.child.kill(signal)
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), 15_000)
  await exited
  clearTimeout(timer)
}

// ---------------------------------------------------------------------------------------------
// Round-robin fronts (the load balancer before the gateways; a Service before each pair)
// ---------------------------------------------------------------------------------------------

export interface Backend {
  name: string
  url: string
  readyUrl: string
  up: boolean
}

export interface Front {
  name: string
  url: string
  /** the replicas it sends to; a rolling upgrade adds and removes them while it runs */
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
export async function startFront(name: string, backends: Backend[]): Promise<Front> {
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
      void answersReady(backend.readyUrl, 1000).then((ready) => (backend.up = ready))
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

export const backendOf = (proc: Proc): Backend => ({ name: proc.name, url: proc.url, readyUrl: proc.readyUrl, up: true })
