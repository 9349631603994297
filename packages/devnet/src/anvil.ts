import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createServer } from 'node:net'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'

export const ANVIL_CHAIN_ID = 31337
export const ANVIL_HOST = '127.0.0.1'

export interface Anvil {
  rpcUrl: string
  port: number
  stop(): Promise<void>
}

export interface StartAnvilOptions {
  port: number
  /** the interface anvil listens on: 127.0.0.1 (default), or 0.0.0.0 in a container other containers reach */
  host?: string
  /** How long to wait for JSON-RPC to answer. */
  timeoutMs?: number
  /** a state file written from `anvil_dumpState` (gunzipped) to start from, instead of an empty chain */
  loadState?: string
}

const platformPackages: Record<string, string> = {
  'linux-x64': 'linux-amd64',
  'linux-arm64': 'linux-arm64',
  'darwin-x64': 'darwin-amd64',
  'darwin-arm64': 'darwin-arm64',
  'win32-x64': 'win32-amd64',
}

/** Path of the anvil binary: ANVIL_BIN, else the platform package that @foundry-rs/anvil installs. */
export function anvilBinary(): string {
  if (process.env.ANVIL_BIN) return process.env.ANVIL_BIN
  const platform = platformPackages[`${process.platform}-${process.arch}`]
  if (!platform) throw new Error(`anvil: no binary for ${process.platform}-${process.arch}; set ANVIL_BIN`)
  try {
    // The platform package is a dependency of @foundry-rs/anvil, so resolve it from there.
    const wrapper = createRequire(import.meta.url).resolve('@foundry-rs/anvil/package.json')
    const pkg = createRequire(wrapper).resolve(`@foundry-rs/anvil-${platform}/package.json`)
    const bin = join(dirname(pkg), 'bin', process.platform === 'win32' ? 'anvil.exe' : 'anvil')
    if (existsSync(bin)) return bin
  } catch {
    // reported below
  }
  throw new Error(`anvil: binary not found (package @foundry-rs/anvil-${platform}); install dependencies or set ANVIL_BIN`)
}

/** Checks the port is free; port 0 picks a free one (what tests running side by side ask for). */
function claimPort(port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(new Error(`anvil: port ${host}:${port} is not free (${err.code ?? err.message})`)),
    )
    server.listen(port, host, () => {
      const { port: chosen } = server.address() as { port: number }
      server.close(() => resolve(chosen))
    })
  })
}

/** The `result` of a JSON-RPC call without parameters. */
export async function rpcResult(rpcUrl: string, method: string): Promise<unknown> {
  const res = await fetch(rpcUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: [] }),
  })
  return ((await res.json()) as { result?: unknown }).result
}

const chainIdAnswers = (rpcUrl: string): Promise<boolean> =>
  rpcResult(rpcUrl, 'eth_chainId').then(
    (result) => result !== undefined && Number(result) === ANVIL_CHAIN_ID,
    () => false,
  )

function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

/** Starts anvil on host:port (127.0.0.1; port 0: a free one) with chain id 31337 and the default test mnemonic. */
export async function startAnvil({ port: wanted, host = ANVIL_HOST, timeoutMs = 10_000, loadState }: StartAnvilOptions): Promise<Anvil> {
  const bin = anvilBinary()
  const port = await claimPort(wanted, host)
  const child = spawn(
    bin,
    [
      '--host',
      host,
      '--port',
      String(port),
      '--chain-id',
      String(ANVIL_CHAIN_ID),
      '--silent',
      ...(loadState ? ['--load-state', loadState] : []),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  )
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  let spawnError: Error | undefined
  child.once('error', (err) => (spawnError = err))

  // listening on every interface, it answers on loopback too
  const rpcUrl = `http://${host === '0.0.0.0' ? ANVIL_HOST : host}:${port}`
  const stop = async () => {
    const exited = waitForExit(child)
    child.kill('SIGTERM')
    await exited
  }
  const deadline = Date.now() + timeoutMs
  while (!(await chainIdAnswers(rpcUrl))) {
    if (spawnError || child.exitCode !== null) {
      throw new Error(`anvil: failed to start (${spawnError?.message ?? `exit ${child.exitCode}`}) ${stderr.trim()}`)
    }
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`anvil: no JSON-RPC answer on ${rpcUrl} within ${timeoutMs} ms ${stderr.trim()}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  return { rpcUrl, port, stop }
}
