// The rehearsals' fleet: 2 gateways behind a round-robin front, 2 replicas of every service
// (each pair behind a front of its own), 2 agent workers and 3 automation schedulers, each
// process started from a release's checkout; and the clients the load needs (keys, automations,
// x402 payments). Shared by scripts/rehearse.ts and scripts/rehearseUpgrade.ts.
import { randomBytes } from 'node:crypto'
import { freePorts, type SentinelRedis } from '@ats/service-kit/testing'
import { root } from '@ats/fleet'
import type { Address } from 'viem'
import type { Devnet } from '../../packages/devnet/src/index.ts'
import { signPayments } from '../../bench/payments.ts'
import { generateApiKey } from '../../services/admin/src/keys/apiKeys.ts'
import { q, say, until } from './books.ts'
import type { LoadContext } from './load.ts'
import { backendOf, killProc, procs, spawnProc, startFront, waitReady, type Component, type Front, type Proc } from './processes.ts'

/** a dead scheduler's run is resumed after this (120 s by default) */
const AUTOMATION_LEASE_MS = 6000

/** A deployable: its component, the settings that make the role, and whether it serves behind a front. */
export type Role =
  | 'admin'
  | 'trading'
  | 'market-data'
  | 'agent-api'
  | 'agent-worker'
  | 'automation-api'
  | 'automation-scheduler'
  | 'gateway'

const roles: Record<Role, { component: Component; env: NodeJS.ProcessEnv; served: boolean }> = {
  admin: { component: 'admin', env: {}, served: true },
  trading: { component: 'trading', env: {}, served: true },
  'market-data': { component: 'market-data', env: {}, served: true },
  'agent-api': { component: 'agent', env: { AGENT_ROLE: 'api' }, served: true },
  'agent-worker': { component: 'agent', env: { AGENT_ROLE: 'worker' }, served: false },
  'automation-api': { component: 'automation', env: { AUTOMATION_SCHEDULER: 'false' }, served: true },
  'automation-scheduler': { component: 'automation', env: { AUTOMATION_SCHEDULER: 'true' }, served: false },
  gateway: { component: 'gateway', env: {}, served: true },
}

/** The code a process runs: a checkout, and the settings its version needs that this tree's do not give. */
export interface Release {
  /** how the report names it */
  name: string
  /** the checkout's root (installed) */
  tree: string
  /** settings on top of everything else, per component */
  env?(component: Component): NodeJS.ProcessEnv
}

export const thisTree: Release = { name: 'this tree', tree: root }

export interface FleetInfrastructure {
  redis: { url: string } | SentinelRedis
  databaseUrl: string
  natsUrls: string
  namespace: string
  devnet: Devnet
}

export interface Fleet {
  adminKey: string
  payTo: `0x${string}`
  front: Front
  /** every front: the gateways' and each service's */
  fronts: Front[]
  gateways: Proc[]
  workers: Proc[]
  schedulers: Proc[]
  /** each process's role and release */
  roleOf: Map<Proc, { role: Role; release: Release }>
  /** starts one more replica of `role` from `release` (not yet ready, not yet behind its front) */
  spawn(role: Role, release: Release): Promise<Proc>
  /** the front a role's replicas serve behind (none for workers and schedulers) */
  frontOf(role: Role): Front | undefined
}

/**
 * Every process, from `release`: the first replica of each service first (it migrates its
 * schema), the gateways last, and the fronts. `settings` are added to each component's.
 */
export async function startFleet(
  { redis, databaseUrl, natsUrls, namespace, devnet }: FleetInfrastructure,
  { release = thisTree, settings: extra = {} }: { release?: Release; settings?: Partial<Record<Component, NodeJS.ProcessEnv>> } = {},
): Promise<Fleet> {
  const adminKey = generateApiKey()
  const payTo = devnet.accounts[9]!.address
  const base: NodeJS.ProcessEnv = {
    DATABASE_URL: databaseUrl,
    NATS_URL: natsUrls,
    JETSTREAM_REPLICAS: '3',
    NATS_NAMESPACE: namespace,
    REDIS_URL: redis.url,
    ...('sentinels' in redis ? { REDIS_SENTINELS: redis.sentinels, REDIS_SENTINEL_MASTER: redis.master } : {}),
    INTERNAL_TOKEN: randomBytes(24).toString('base64url'),
    RPC_URL: devnet.rpcUrl,
    CHAIN_ID: String(devnet.chainId),
    CHAIN_NAME: 'devnet',
    ADDRESS_BOOK: devnet.addressBookPath,
    SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    HOST: '127.0.0.1',
  }
  const settings: Record<Component, NodeJS.ProcessEnv> = {
    gateway: {
      PAY_TO: payTo,
      // one client address (the front) and a few payers send everything
      RATE_LIMIT_READONLY: '1000000',
      RATE_LIMIT_READWRITE: '1000000',
      PAID_RATE_LIMIT_PER_ADDRESS: '1000000',
      PAID_RATE_LIMIT_PER_PAYER: '1000000',
      MAX_CONCURRENT_PER_ADDRESS: '100000',
    },
    // settlement off unless asked: the server wallet's transactions on the devnet are then the swaps (and their approvals) alone
    admin: { ADMIN_API_KEY: adminKey, SETTLEMENT_ENABLED: 'false' },
    trading: {},
    'market-data': {},
    // a dead worker's job goes to another after 5 s (30 s by default)
    agent: { AGENT_ACK_WAIT_MS: '5000' },
    // a dead scheduler's run is resumed after 6 s (120 s by default); 2 s intervals
    automation: { AUTOMATION_MIN_INTERVAL_MS: '2000', AUTOMATION_TICK_MS: '250', AUTOMATION_LEASE_MS: String(AUTOMATION_LEASE_MS) },
  }
  const serviceFronts: Partial<Record<Component, Front>> = {}
  const roleOf = new Map<Proc, { role: Role; release: Release }>()
  const counts = new Map<Role, number>()

  const spawn = async (role: Role, from: Release): Promise<Proc> => {
    const { component, env: roleEnv } = roles[role]
    const n = (counts.get(role) ?? 0) + 1
    counts.set(role, n)
    const [port, ops] = await freePorts(2)
    const env: NodeJS.ProcessEnv = { ...base, ...settings[component], ...extra[component], ...roleEnv, PORT: String(port) }
    let proc: Proc
    if (component === 'gateway') {
      const fronts = serviceFronts as Record<Component, Front>
      Object.assign(env, {
        OPS_PORT: String(ops),
        OPS_HOST: '127.0.0.1',
        ADMIN_URL: fronts.admin.url,
        AGENT_URL: fronts.agent.url,
        TRADING_URL: fronts.trading.url,
        MARKET_DATA_URL: fronts['market-data'].url,
        AUTOMATION_URL: fronts.automation.url,
      })
      Object.assign(env, from.env?.(component))
      proc = spawnProc(
        `${role}-${n}`,
        component,
        'gateway/src/server.ts',
        env,
        `http://127.0.0.1:${port}`,
        `http://127.0.0.1:${ops}`,
        from.tree,
      )
    } else {
      Object.assign(env, from.env?.(component))
      proc = spawnProc(
        `${role}-${n}`,
        component,
        `services/${component}/src/server.ts`,
        env,
        `http://127.0.0.1:${port}`,
        undefined,
        from.tree,
      )
    }
    roleOf.set(proc, { role, release: from })
    return proc
  }

  say(`starting the first replica of each service (migrations)${release === thisTree ? '' : `, from ${release.name}`}`)
  await waitReady(await spawn('admin', release))
  const firsts = await Promise.all((['trading', 'market-data', 'agent-api', 'automation-api'] as const).map((role) => spawn(role, release)))
  await Promise.all(firsts.map((p) => waitReady(p)))
  say('starting the other replicas, 2 agent workers and 3 automation schedulers')
  const rest = await Promise.all(
    (['admin', 'trading', 'market-data', 'agent-api', 'automation-api'] as const).map((role) => spawn(role, release)),
  )
  const workers = await Promise.all([1, 2].map(() => spawn('agent-worker', release)))
  const schedulers = await Promise.all([1, 2, 3].map(() => spawn('automation-scheduler', release)))
  await Promise.all([...rest, ...workers, ...schedulers].map((p) => waitReady(p)))

  // each pair of replicas behind a front of its own, as a Kubernetes Service: the gateway knows one URL a service
  for (const component of ['admin', 'trading', 'market-data', 'agent', 'automation'] as const) {
    const replicas = procs.filter((p) => roleOf.has(p) && p.component === component && roles[roleOf.get(p)!.role].served)
    serviceFronts[component] = await startFront(component, replicas.map(backendOf))
  }
  const gateways = await Promise.all([1, 2].map(() => spawn('gateway', release)))
  await Promise.all(gateways.map((g) => waitReady(g)))
  const front = await startFront('gateway', gateways.map(backendOf))
  say(`fleet ready: ${procs.length} processes; the front at ${front.url}`)
  const frontOf = (role: Role) => (role === 'gateway' ? front : roles[role].served ? serviceFronts[roles[role].component] : undefined)
  return {
    adminKey,
    payTo,
    front,
    fronts: [front, ...Object.values(serviceFronts)],
    gateways,
    workers,
    schedulers,
    roleOf,
    spawn,
    frontOf,
  }
}

export interface Clients {
  ctx: LoadContext
  /** the addresses that pay (devnet accounts 1-4) */
  payers: Address[]
  /** pauses the automations (after the load), saying so when one cannot be */
  stopAutomations(): Promise<void>
}

/** Keys for the keyed load, 4 automations buying ARB every 3 s, and x402 payments signed as they are sent (devnet accounts 1-4 in turn). */
export async function prepareClients(devnet: Devnet, { adminKey, payTo, front }: Fleet): Promise<Clients> {
  const call = async (path: string, method: string, body: unknown, key = adminKey) => {
    // no content-type without a body: a JSON one with an empty body is refused (400)
    const res = await fetch(`${front.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    const answer = (await res.json().catch(() => ({}))) as any
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(answer)}`)
    return answer
  }
  // quotes need readwrite; several keys, as several clients (one key may have 64 requests in flight)
  const loadKeys: string[] = []
  for (let i = 0; i < 8; i++)
    loadKeys.push((await call('/admin/keys', 'POST', { tier: 'readwrite', label: `rehearsal load ${i}` })).key as string)
  const wallet = devnet.accounts[5]!.address
  const ownerKey = (await call('/admin/keys', 'POST', { tier: 'readwrite', label: 'rehearsal automations', wallet })).key as string
  const automations: string[] = []
  for (let i = 0; i < 4; i++) {
    const config = { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '3s' }
    const made = await call(
      '/automations',
      'POST',
      { walletAddress: wallet, type: 'recurring-buy', name: `rehearsal ${i}`, config },
      ownerKey,
    )
    automations.push(made.automation.id)
  }

  const usdc = devnet.book.tokens.find((t) => t.symbol === 'USDC')!.address
  const payers = devnet.accounts.slice(1, 5).map((a) => ({ address: a.address, privateKey: a.privateKey }))
  let paid = 0
  const signPayment = () => {
    const now = BigInt(Math.floor(Date.now() / 1000))
    const payer = payers[paid++ % payers.length]!
    const [header] = signPayments({
      count: 1,
      payers: [payer],
      payTo,
      usdc,
      chainId: devnet.chainId,
      value: 10_000n,
      validAfter: now - 60n,
      validBefore: now + 600n,
    })
    const { nonce, from } = (
      JSON.parse(Buffer.from(header!, 'base64').toString()) as { payload: { authorization: { nonce: string; from: string } } }
    ).payload.authorization
    return { header: header!, nonce, payer: from.toLowerCase() }
  }
  return {
    ctx: { front: front.url, loadKeys, signPayment },
    payers: payers.map((p) => p.address),
    stopAutomations: async () => {
      // paused, they make no more runs and keep those they made (deleted, their runs would go
      // too): the books are then read with nothing under way
      for (const id of automations)
        await call(`/automations/${id}`, 'PATCH', { status: 'paused' }, ownerKey).catch((error: Error) =>
          say(`automation ${id} not paused: ${error.message}`),
        )
    },
  }
}

/**
 * Stops `victim` while it holds work: the others doing the same work are paused (SIGSTOP) for a
 * moment, so whatever `claimedSince` finds claimed after the pause began is the victim's; it is
 * sent `signal` at once (SIGKILL as a crash, SIGTERM as a rolling update), the others are resumed
 * (not left paused through a drain, past their leases), and its exit waited for. Resolves with
 * what the victim held.
 */
export async function stopMidWork(
  victim: Proc,
  others: Proc[],
  claimedSince: (since: Date) => Promise<string | undefined>,
  signal: NodeJS.Signals,
): Promise<string> {
  for (const other of others) other.child.kill('SIGSTOP')
  let exited: Promise<void> | undefined
  try {
    const { now } = (await q<{ now: Date }>('SELECT now()'))[0]!
    const held = await until(`${victim.name} to take work`, () => claimedSince(now), 20_000, 5)
    // killProc sends the signal before it first waits
    exited = killProc(victim, signal)
    return held
  } finally {
    for (const other of others) other.child.kill('SIGCONT')
    await exited
  }
}

/** a job claimed (running) since `since`, or an automation run started since then */
export const claimedSince = {
  job: async (since: Date) =>
    (await q<{ id: string }>(`SELECT id FROM agent.jobs WHERE status = 'running' AND updated_at > $1 LIMIT 1`, [since]))[0]?.id,
  // started since then, or resumed since then (a claim sets the lease: a resumed run keeps its
  // start, and while the others hold every automation's run, resuming one is all there is to take)
  run: async (since: Date) =>
    (
      await q<{ id: string }>(
        `SELECT id FROM automation.automation_runs WHERE status = 'running' AND (started_at > $1 OR lease_until > $1::timestamptz + $2 * interval '1 millisecond') LIMIT 1`,
        [since, AUTOMATION_LEASE_MS],
      )
    )[0]?.id,
}
