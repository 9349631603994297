// One nats-server with JetStream and an authorization block, for `pnpm start` (access.ts) and the
// least-privilege tests: a server that enforces each component's permissions.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface NatsServer {
  url: string
  child: ChildProcess
  /** the server's last lines of output (permission violations are logged there) */
  log(): string
  stop(): Promise<void>
}

/**
 * nats-server with JetStream in a new temporary directory, on a loopback port it picks, with the
 * given authorization block. Resolves once it accepts connections (within 10 s); stop() ends it
 * and removes the directory.
 */
export async function startNatsServer({
  authorization,
  binary = 'nats-server',
}: {
  authorization: string
  binary?: string
}): Promise<NatsServer> {
  const dir = await mkdtemp(join(tmpdir(), 'ats-nats-'))
  const config = join(dir, 'nats.conf')
  await writeFile(config, `listen: "127.0.0.1:-1"\njetstream { store_dir: ${JSON.stringify(join(dir, 'jetstream'))} }\n${authorization}`, {
    mode: 0o600,
  })
  const child = spawn(binary, ['-c', config], { stdio: ['ignore', 'ignore', 'pipe'] })
  let output = ''
  child.stderr!.on('data', (chunk) => (output = (output + chunk).slice(-20_000)))
  const exited = once(child, 'exit')
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      await exited
    }
    await rm(dir, { recursive: true, force: true })
  }
  const deadline = Date.now() + 10_000
  // port -1: the server takes a free port and says which before it is ready
  while (!/Server is ready/.test(output)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop()
      throw new Error(`nats-server did not start: ${output.trim().split('\n').slice(-3).join(' | ') || 'no output'}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const port = /Listening for client connections on 127\.0\.0\.1:(\d+)/.exec(output)?.[1]
  return { url: `nats://127.0.0.1:${port}`, child, log: () => output, stop }
}
