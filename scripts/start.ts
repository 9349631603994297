import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { delimiter, join } from 'node:path'
import { createInterface } from 'node:readline'
// by path, like the services themselves: the root package depends on no service
import { generateApiKey } from '../services/admin/src/keys/apiKeys.ts'
import type { Devnet } from '../packages/devnet/src/deploy.ts'
import { describeDevnet, devnetPort, startDevnetOrExplain } from '../packages/devnet/src/cli.ts'
import { fleetMembers, memberEnv, type FleetMember } from '@ats/fleet'
import { localInfra, portOpen } from '@ats/service-kit'
import { fleetAccess, startNatsServer, type FleetAccess, type NatsServer } from '@ats/fleet/access'

/**
 * pnpm start: the whole fleet on this machine. Each service runs as its own
 * process (as in production), admin-side services first, the gateway last.
 * Without RPC_URL it first starts the local devnet (anvil on 127.0.0.1:8545, see
 * packages/devnet) and points every service at it; anvil stops last.
 */
const say = (line: string) => process.stdout.write(`${line}\n`)
const fail = (line: string): never => {
  process.stderr.write(`${line}\n`)
  process.exit(1)
}

/** Whether the server of `url` (the first, when comma-separated) accepts connections. */
function reachable(url: string, fallbackPort: number): Promise<boolean> {
  const { hostname, port } = new URL(url.split(',')[0]!)
  return portOpen(hostname || '127.0.0.1', Number(port) || fallbackPort, 1500)
}

async function infrastructure(): Promise<NodeJS.ProcessEnv> {
  const env: NodeJS.ProcessEnv = {}
  const databaseUrl = process.env.DATABASE_URL || localInfra.databaseUrl
  if (!(await reachable(databaseUrl, 5432))) {
    fail(
      `PostgreSQL is not reachable at ${new URL(databaseUrl).host}. Start it (Debian: pg_ctlcluster 15 main start) or set DATABASE_URL to a reachable server.`,
    )
  }
  env.DATABASE_URL = databaseUrl
  // without NATS_URL, a nats-server of this run's own enforces each component's permissions (leastPrivilege)
  if (!process.env.NATS_URL && natsServerBinary) return { ...env, ...(await redis()) }
  const natsUrl = process.env.NATS_URL || localInfra.natsUrl
  if (!(await reachable(natsUrl, 4222))) {
    fail(`NATS is not reachable at ${natsUrl}. Start it with JetStream (nats-server -js) or set NATS_URL to a reachable server.`)
  }
  env.NATS_URL = natsUrl
  return { ...env, ...(await redis()) }
}

async function redis(): Promise<NodeJS.ProcessEnv> {
  // the gateway's paid routes keep used nonces, payment ids and reservations there, shared by every replica
  const redisUrl = process.env.REDIS_URL || localInfra.redisUrl
  if (!(await reachable(redisUrl, 6379)))
    fail(
      `Redis is not reachable at ${new URL(redisUrl).host}: start redis-server or set REDIS_URL to a reachable server (the paid routes need it).`,
    )
  return { REDIS_URL: redisUrl }
}

/** nats-server on PATH (or in /usr/sbin, Debian's place for it, often not on a user's PATH) */
const natsServerBinary = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin']
  .map((dir) => join(dir, 'nats-server'))
  .find((path) => existsSync(path))

/**
 * Least privilege (docs/security.md): each member's own NATS user and Postgres role. Roles need
 * DATABASE_URL to be able to create them (a superuser); when it cannot, every member uses
 * DATABASE_URL as it is, with a warning. NATS users need a server that knows them: this run's
 * own nats-server when NATS_URL is unset, else NATS_URL is used as given, with a warning.
 */
async function leastPrivilege(members: FleetMember[], settings: NodeJS.ProcessEnv): Promise<{ access: FleetAccess; natsUrl?: string }> {
  const namespace = settings.NATS_NAMESPACE || undefined
  let access: FleetAccess
  try {
    access = await fleetAccess({ members, namespace, databaseUrl: settings.DATABASE_URL })
    say(`Postgres: each service connects as its own role (${access.roles.map((r) => `${r.role} -> ${r.schema}`).join(', ')}).`)
  } catch (error) {
    say(`warning: ${(error as Error).message}; every service uses DATABASE_URL as it is (no per-service roles).`)
    access = await fleetAccess({ members, namespace })
  }
  if (settings.NATS_URL) {
    say(
      `warning: NATS_URL is set (or nats-server is not installed): the services use it as given, and NATS permissions between them are not enforced (docs/security.md).`,
    )
    return { access }
  }
  natsServer = await startNatsServer({ authorization: access.natsAuthorization, binary: natsServerBinary })
  // a subject a service's permissions lack is refused: show it, it names the user and the subject
  createInterface({ input: natsServer.child.stderr! }).on('line', (line) => {
    if (/violation/i.test(line)) process.stdout.write(`${'[nats]'.padEnd(14)}${line}\n`)
  })
  say(
    `NATS: this run's own nats-server (JetStream in a temporary directory) at ${natsServer.url}, one user per service with its permissions.`,
  )
  return { access, natsUrl: natsServer.url }
}

function run(member: FleetMember, env: NodeJS.ProcessEnv): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', join(member.dir, 'src', 'server.ts')], {
    cwd: member.dir,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const label = `[${member.name}]`.padEnd(14)
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream }).on('line', (line) => process.stdout.write(`${label}${line}\n`))
  }
  return child
}

async function waitReady(url: string, child: ChildProcess, name: string): Promise<void> {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${name} exited with code ${child.exitCode} while starting (see its lines above)`)
    try {
      if ((await fetch(`${url}/ready`)).ok) return
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  throw new Error(`${name} was not ready within 60 s at ${url}/ready`)
}

const children = new Map<string, ChildProcess>()
let devnet: Devnet | undefined
let natsServer: NatsServer | undefined
/** set while the devnet starts, so that a Ctrl-C then still stops its anvil */
let devnetStarting: Promise<Devnet> | undefined
let stopping = false

async function stopAll(code: number): Promise<never> {
  stopping = true
  const exits = [...children.values()].reverse().map(
    (child) =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.kill('SIGTERM')
      }),
  )
  await Promise.race([Promise.all(exits), new Promise((resolve) => setTimeout(resolve, 15_000))])
  await natsServer?.stop().catch((error: Error) => process.stderr.write(`nats-server: ${error.message}\n`))
  // The chain goes last: services may still use it while they shut down.
  const chain = devnet ?? (await devnetStarting?.catch(() => undefined))
  await chain?.stop().catch((error: Error) => process.stderr.write(`devnet: ${error.message}\n`))
  process.exit(code)
}

process.on('SIGINT', () => {
  if (stopping) return
  say('\nstopping the fleet…')
  void stopAll(0)
})
process.on('SIGTERM', () => void stopAll(0))

const base: NodeJS.ProcessEnv = { ...process.env, ...(await infrastructure()) }
delete base.PORT
base.INTERNAL_TOKEN ||= randomBytes(24).toString('base64url')
if (!base.ADMIN_API_KEY) {
  base.ADMIN_API_KEY = generateApiKey()
  say(
    `ADMIN_API_KEY is not set; this run's bootstrap admin key is:\n\n  ${base.ADMIN_API_KEY}\n\nSet ADMIN_API_KEY to keep one across restarts.\n`,
  )
}

if (process.env.RPC_URL) {
  say(`Chain: RPC_URL=${process.env.RPC_URL} (no devnet started)`)
} else {
  try {
    devnetStarting = startDevnetOrExplain(devnetPort())
    devnet = await devnetStarting
  } catch (error) {
    fail(`${(error as Error).message}\n(set RPC_URL to use another chain instead of the devnet)`)
  }
  if (stopping) await new Promise(() => {}) // Ctrl-C while the devnet started: stopAll stops it and exits
  Object.assign(base, {
    RPC_URL: devnet!.rpcUrl,
    CHAIN_ID: String(devnet!.chainId),
    CHAIN_NAME: 'devnet',
    ADDRESS_BOOK: devnet!.addressBookPath,
    // the server wallet is account 0 unless one is configured
    SERVER_WALLET_PRIVATE_KEY: process.env.SERVER_WALLET_PRIVATE_KEY || devnet!.accounts[0]!.privateKey,
    // the signer of swaps from users' own wallets under their grants (never the server wallet) is account 8
    GRANT_DELEGATE_PRIVATE_KEY: process.env.GRANT_DELEGATE_PRIVATE_KEY || devnet!.accounts[8]!.privateKey,
    // x402 payments go to the server wallet unless PAY_TO says otherwise
    PAY_TO: process.env.PAY_TO || devnet!.accounts[0]!.address,
  })
  say(
    `${describeDevnet(devnet!, { accounts: false })}\n  Ten funded test accounts (address + public test key): "devnet.accounts" in the address book\n`,
  )
}

const members = await fleetMembers()
const gateway = members.find((m) => m.name === 'gateway')!
try {
  const { access, natsUrl } = await leastPrivilege(members, base)
  for (const member of members) {
    const isGateway = member === gateway
    const { env, port, opsPort } = memberEnv(member, base, process.env)
    Object.assign(env, access.envOf(member.name, natsUrl ?? base.NATS_URL!))
    // without this run's own nats-server, NATS_URL stays as given (it may carry its own credentials)
    if (!natsUrl) env.NATS_URL = base.NATS_URL
    const child = run(member, env)
    children.set(member.name, child)
    child.once('exit', (code, signal) => {
      if (stopping) return
      process.stderr.write(`${member.name} stopped unexpectedly (${signal ?? `exit code ${code}`}); stopping the fleet\n`)
      void stopAll(1)
    })
    await waitReady(`http://127.0.0.1:${opsPort}`, child, member.name)
    if (isGateway) {
      say(`\nThe gateway listens on http://localhost:${port}  (try: curl localhost:${port}/health; the API reference at /docs)`)
      say(`Its /ready and /metrics: http://${env.OPS_HOST}:${opsPort} (the operations port, not for clients; OPS_HOST sets its interface).`)
      say(
        `Services: ${members
          .filter((m) => m !== gateway)
          .map((m) => `${m.name} :${m.definition.port}`)
          .join(', ')}. Ctrl-C stops everything.\n`,
      )
    }
  }
} catch (error) {
  process.stderr.write(`${(error as Error).message}\n`)
  await stopAll(1)
}
