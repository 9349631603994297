import { randomBytes } from 'node:crypto'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { paymentChannels, type PaymentChannels } from '@ats/contracts'
import { freshDatabase } from '@ats/service-kit/testing'
// by path: @ats/devnet is a dependency of the services' tests, not of the root package
import { startDevnet, type Devnet } from '../packages/devnet/src/index.ts'
import { openPaymentsStream } from './jetstream.ts'
import { ready, start, stopAll, type Started } from './processes.ts'

/**
 * What the benches that go through the gateway share: a database, a NATS namespace and a devnet
 * of their own (all removed at the end), the admin service (it creates the API keys), the
 * gateway's settings, a key made through the gateway, and `runBench`, which stops every process
 * and runs the clean-ups however the bench ends.
 */

/** Run at the end in reverse order, whether the bench succeeded or not. */
export const cleanups: Array<() => unknown> = []

/** Runs `main`, then stops every process started and runs the clean-ups; exits 1 when anything threw. */
export async function runBench(main: () => Promise<void>): Promise<never> {
  let failed = false
  try {
    await main()
  } catch (error) {
    console.error(error)
    failed = true
  } finally {
    await stopAll()
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup()
      } catch (error) {
        console.error('cleanup failed:', error)
      }
    }
  }
  process.exit(failed ? 1 : 0)
}

export interface BenchBase {
  /** settings of every server: a fresh database, NATS, Redis, the internal token, the admin's bootstrap key, LOG_LEVEL */
  env: {
    DATABASE_URL: string
    NATS_URL: string
    REDIS_URL: string
    INTERNAL_TOKEN: string
    ADMIN_API_KEY: string
    LOG_LEVEL: string
  }
  /** RPC_URL, CHAIN_ID and NATS_NAMESPACE of the bench's devnet and namespace */
  chain: { RPC_URL: string; CHAIN_ID: string; NATS_NAMESPACE: string }
  devnet: Devnet
  addressBookPath: string
  /** a temporary directory of the bench's own, removed at the end */
  dir: string
  /** the namespace's payments stream, ledger consumer and blocked-payers bucket */
  payments: PaymentChannels
}

/**
 * A database (dropped at the end, so runs leave no keys behind), a devnet (anvil, on
 * `devnetPort`) and a NATS namespace of the bench's own: its admin answers only its gateways
 * (not a `pnpm start` fleet's on this NATS), and its payments stream and blocked-payers bucket
 * are removed at the end.
 */
export async function startBase({ devnetPort }: { devnetPort: number }): Promise<BenchBase> {
  const env = {
    DATABASE_URL: await freshDatabase({ teardown: (fn) => cleanups.push(fn) }),
    NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    INTERNAL_TOKEN: randomBytes(18).toString('base64url'),
    ADMIN_API_KEY: `atsk_${randomBytes(24).toString('base64url')}`,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
  }
  const dir = mkdtempSync(join(tmpdir(), 'bench-'))
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  const addressBookPath = join(dir, 'address-book.json')
  const devnet = await startDevnet({ port: devnetPort, addressBookPath })
  cleanups.push(() => devnet.stop())

  const namespace = `bench${randomBytes(6).toString('hex')}`
  const payments = paymentChannels(namespace)
  cleanups.push(async () => {
    const js = await openPaymentsStream(env.NATS_URL, payments.stream, payments.ledgerConsumer)
    await js.remove([payments.stream, `KV_${payments.blockedPayers}`])
    await js.close()
  })
  return {
    env,
    chain: { RPC_URL: devnet.rpcUrl, CHAIN_ID: String(devnet.chainId), NATS_NAMESPACE: namespace },
    devnet,
    addressBookPath,
    dir,
    payments,
  }
}

/** The warnings and errors in a pino log file, each distinct one once with how often, one a line; '  (none)' when there are none. */
export function logProblems(path: string): string {
  const seen = new Map<string, number>()
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (!/"level":[4-6]0\b/.test(line)) continue // warn, error, fatal; skips the access log quickly
    try {
      const entry = JSON.parse(line) as { msg?: string; err?: { message?: string } }
      const text = `${entry.msg ?? ''}${entry.err?.message ? `: ${entry.err.message}` : ''}`
      seen.set(text, (seen.get(text) ?? 0) + 1)
    } catch {}
  }
  return [...seen].map(([text, n]) => `  ${n} × ${text}`).join('\n') || '  (none)'
}

export interface ServiceProcess extends Started {
  /** the service's warnings and errors so far, each distinct one once, with how often */
  problems(): string
}

/** A service of the repository on 127.0.0.1:`port` with the bench's settings plus `env`, its log in the bench's directory. */
export async function startService(base: BenchBase, name: string, port: number, env: NodeJS.ProcessEnv): Promise<ServiceProcess> {
  const log = join(base.dir, `${name}.log`)
  const fd = openSync(log, 'w')
  const service = await start(
    `services/${name}/src/server.ts`,
    { ...base.env, ...base.chain, ADDRESS_BOOK: base.addressBookPath, PORT: String(port), HOST: '127.0.0.1', ...env },
    fd,
  )
  closeSync(fd)
  return Object.assign(service, { problems: () => logProblems(log) })
}

/** The admin service on 127.0.0.1:`port`; settlement off unless `env` says otherwise. */
export const startAdmin = (base: BenchBase, port: number, env: NodeJS.ProcessEnv = {}) =>
  startService(base, 'admin', port, { SETTLEMENT_ENABLED: 'false', ...env })

/** The market-data service on 127.0.0.1:`port` on its devnet sources, caching in the bench's Redis. */
export const startMarketData = (base: BenchBase, port: number, extra: NodeJS.ProcessEnv = {}) =>
  startService(base, 'market-data', port, { ADDRESS_BOOK: base.addressBookPath, ...extra })

/** The gateway's settings for this bench's fleet: its admin at `adminUrl`, the devnet's address book, plus `extra`. */
export function gatewayEnv(base: BenchBase, adminUrl: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return { ...base.env, ...base.chain, HOST: '127.0.0.1', ADMIN_URL: adminUrl, ADDRESS_BOOK: base.addressBookPath, ...extra }
}

/**
 * The paid edge as the settlement benches load it: admin settling from `serverWalletKey`, and a
 * gateway taking x402 payments to `payTo` in front of the bench's upstream (agent and
 * market-data), its paid limits out of the way (one client address sends every paid request).
 * Both ready; the caller stops them with the rest (stopAll).
 */
export async function startPaidStack(
  base: BenchBase,
  ports: { gateway: number; ops: number; admin: number },
  { serverWalletKey, payTo }: { serverWalletKey: string; payTo: string },
) {
  const upstream = (await start('bench/upstream.ts', {}, 'pipe')).address
  const admin = await startAdmin(base, ports.admin, {
    SETTLEMENT_ENABLED: 'true',
    SERVER_WALLET_PRIVATE_KEY: serverWalletKey,
    LOG_LEVEL: 'warn',
  })
  const gateway = await start(
    'gateway/src/server.ts',
    gatewayEnv(base, `http://127.0.0.1:${ports.admin}`, {
      AGENT_URL: upstream,
      MARKET_DATA_URL: upstream,
      PORT: String(ports.gateway),
      OPS_PORT: String(ports.ops),
      LOG_LEVEL: 'warn',
      PAY_TO: payTo,
      PAID_RATE_LIMIT_PER_ADDRESS: '1000000000',
      PAID_RATE_LIMIT_PER_PAYER: '1000000000',
      MAX_CONCURRENT_PER_ADDRESS: '100000',
      SKIP_PAYMENT: 'false',
    }),
    'ignore',
  )
  await ready(`http://127.0.0.1:${ports.admin}`, admin)
  await ready([`http://127.0.0.1:${ports.ops}`, `http://127.0.0.1:${ports.gateway}`], gateway)
  return { admin, gateway }
}

/**
 * A gateway in front of the agent at `ports.agent` (readwrite limit out of the way), ready, with a
 * readwrite key made through it: the /v1 benches' entry.
 */
export async function startAgentGateway(
  base: BenchBase,
  ports: { gateway: number; ops: number; admin: number; agent: number },
  label: string,
  logLevel = 'warn',
) {
  const process = await start(
    'gateway/src/server.ts',
    gatewayEnv(base, `http://127.0.0.1:${ports.admin}`, {
      AGENT_URL: `http://127.0.0.1:${ports.agent}`,
      PORT: String(ports.gateway),
      OPS_PORT: String(ports.ops),
      LOG_LEVEL: logLevel,
      RATE_LIMIT_READWRITE: '1000000',
    }),
    'ignore',
  )
  const url = `http://127.0.0.1:${ports.gateway}`
  await ready([`http://127.0.0.1:${ports.ops}`, url], process)
  return { process, url, key: await createKey(base, url, 'readwrite', label) }
}

/** A new API key of `tier`, made through the gateway at `gatewayUrl` with the admin's bootstrap key. */
export async function createKey(base: BenchBase, gatewayUrl: string, tier: 'readonly' | 'readwrite', label = 'bench'): Promise<string> {
  const created = await fetch(`${gatewayUrl}/admin/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${base.env.ADMIN_API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ tier, label }),
  })
  if (!created.ok) throw new Error(`POST /admin/keys answered ${created.status} ${await created.text()}`)
  return ((await created.json()) as { key: string }).key
}
