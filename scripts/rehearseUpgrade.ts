import { execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { root } from '@ats/fleet'
import type { SentinelRedis } from '@ats/service-kit/testing'
import * as books from './rehearsal/books.ts'
import { elapsed, out, rpc, say, settle, type Check } from './rehearsal/books.ts'
import { claimedSince, prepareClients, startFleet, stopMidWork, thisTree, type Fleet, type Release, type Role } from './rehearsal/fleet.ts'
import { cleanups, runRehearsal, startInfrastructure } from './rehearsal/infrastructure.ts'
import { finalRound, ok2xx, samples, setPhase, steady } from './rehearsal/load.ts'
import { alive, backendOf, killProc, processSettings, procs, waitReady, type Proc } from './rehearsal/processes.ts'

/**
 * pnpm rehearse:upgrade: a rolling upgrade from the previous release to this tree, under load.
 *
 * The previous release (`--from <ref>`; by default the newest v* tag reachable from HEAD, or,
 * with none, the commit before release/contracts.json was added) is checked out in a worktree
 * of its own, installed, and run as the fleet `pnpm rehearse` runs (scripts/rehearsal/): a 3-node
 * NATS cluster, Redis under Sentinel, a Postgres server of its own, a devnet, 2 gateways behind a front, 2
 * replicas of every service (each pair behind a front), 2 agent workers, 3 automation
 * schedulers; admin settles payments on chain. With paid, keyed, job and automation load running,
 * every deployable is rolled to this tree one replica at a time, as a Kubernetes rolling update
 * with maxSurge 1 and maxUnavailable 0: the new replica started (it migrates its schema), ready,
 * put behind the front; the old one taken out of the front, and after a preStop pause stopped
 * with SIGTERM (its drain). Then one trading replica and one agent worker are rolled back to the
 * previous release, against the new schema, with the load on them. The books are checked as
 * `pnpm rehearse` checks them, and settlement and the JetStream consumers besides; one line a
 * check, exit 1 when one fails.
 */

const RATE = { prompt: 4, paidRead: 2, keyed: 20 }
const NAMESPACE = 'rehearse'
/** the load on each fleet before and after the roll, and on the fleet rolled back */
const HOLD_MS = 10_000
/** the pause between a replica leaving its front and its SIGTERM (k8s: endpoints removed, then the preStop sleep; 5 s there) */
const PRESTOP_MS = 2_000
/** the order the deployables are rolled in: services before their callers, the gateways last */
const ROLL_ORDER: Role[] = [
  'admin',
  'trading',
  'market-data',
  'agent-api',
  'agent-worker',
  'automation-api',
  'automation-scheduler',
  'gateway',
]
/** rolled back to the previous release once everything runs this tree */
const ROLL_BACK: Role[] = ['trading', 'agent-worker']

const { values: args } = parseArgs({ options: { from: { type: 'string' } } })

const git = (...argv: string[]) => execFileSync('git', argv, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim()

/** The release to upgrade from: --from, else the newest v* tag reachable from HEAD, else the fleet before releases existed. */
function previousRelease(): { ref: string; sha: string; why: string } {
  if (args.from) return { ref: args.from, sha: git('rev-parse', '--verify', `${args.from}^{commit}`), why: '--from' }
  try {
    const tag = git('describe', '--tags', '--abbrev=0', '--match', 'v*', 'HEAD')
    return { ref: tag, sha: git('rev-parse', `${tag}^{commit}`), why: 'the newest v* tag reachable from HEAD' }
  } catch {
    const added = git('log', '--diff-filter=A', '--format=%H', '--reverse', '--', 'release/contracts.json').split('\n')[0]
    if (!added) throw new Error('no v* tag and no commit adding release/contracts.json: give --from <ref>')
    return {
      ref: `${added.slice(0, 7)}^`,
      sha: git('rev-parse', `${added}^`),
      why: 'no v* tag: the parent of the commit that added release/contracts.json (the fleet before releases)',
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The previous release: its checkout (removed at the end, also on failure and Ctrl-C) and settings
// ---------------------------------------------------------------------------------------------

/** Checks `sha` out in a worktree of its own under /tmp and installs it (the store is warm; postinstall generates the Prisma clients). */
async function checkOut(sha: string, runDir: string): Promise<{ tree: string; ms: number }> {
  const started = Date.now()
  const tree = join(tmpdir(), `ats-upgrade-${sha.slice(0, 8)}-${randomBytes(3).toString('hex')}`)
  git('worktree', 'add', '--detach', tree, sha)
  cleanups.push(() => {
    try {
      git('worktree', 'remove', '--force', tree)
    } catch {
      rmSync(tree, { recursive: true, force: true })
      git('worktree', 'prune')
    }
  })
  const log = join(runDir, 'install.log')
  const fd = openSync(log, 'w')
  const install = spawn('pnpm', ['install', '--frozen-lockfile', '--prefer-offline'], { cwd: tree, stdio: ['ignore', fd, fd] })
  const [code] = (await once(install, 'exit')) as [number | null]
  if (code !== 0) throw new Error(`pnpm install in ${tree} failed (${code}): ${readFileSync(log, 'utf8').slice(-1500)}`)
  return { tree, ms: Date.now() - started }
}

/**
 * The previous release as a Release: its checkout, and the settings its code needs that this
 * tree's do not give it, found by what the code knows (not by version numbers), each noted.
 */
async function releaseOf(name: string, tree: string, redis: SentinelRedis, notes: string[]): Promise<Release> {
  const env: NodeJS.ProcessEnv = {}
  const kitConfig = join(tree, 'packages/service-kit/src/config.ts')
  if (existsSync(kitConfig) && !readFileSync(kitConfig, 'utf8').includes('REDIS_SENTINELS')) {
    // before Sentinel support, REDIS_URL is the one server: with sentinels it names only the
    // password and db (its host is not used), and the old code would connect to that host
    const primary = await redis.primaryPort()
    env.REDIS_URL = `redis://127.0.0.1:${primary}`
    notes.push(
      `${name} knows no REDIS_SENTINELS: its processes get REDIS_URL=redis://127.0.0.1:${primary}, the primary itself (it cannot follow a failover; none is made during the roll)`,
    )
  }
  return { name, tree, env: () => env }
}

// ---------------------------------------------------------------------------------------------
// The roll
// ---------------------------------------------------------------------------------------------

interface Stopped {
  name: string
  /** the exit code, or the signal that ended it */
  exit: string
  ms: number
}

interface Roll {
  lines: string[]
  /** every process stopped with SIGTERM: how it ended */
  stopped: Stopped[]
  /** the jobs and automation runs workers and schedulers held as they were stopped, by who held them */
  jobs: Map<string, string>
  runs: Map<string, string>
}

/** The roll's steps, each logged and timed. */
function newRoll(): Roll {
  return { lines: [], stopped: [], jobs: new Map(), runs: new Map() }
}

const step = (roll: Roll, line: string) => {
  roll.lines.push(`${elapsed()}: ${line}`)
  say(line)
}

/** What a worker or scheduler holds as it is stopped: found as pnpm rehearse finds a killed one's. */
const heldWork: Partial<Record<Role, { kind: 'jobs' | 'runs'; claimedSince(since: Date): Promise<string | undefined> }>> = {
  'agent-worker': { kind: 'jobs', claimedSince: claimedSince.job },
  'automation-scheduler': { kind: 'runs', claimedSince: claimedSince.run },
}

/**
 * Replaces `old` with a replica of the same role from `to`, as a rolling update does with
 * maxSurge 1, maxUnavailable 0: the new one started and ready, behind the front; the old one
 * out of the front, then (after the preStop pause) SIGTERM, and its drain waited for. A worker
 * or scheduler is stopped while it holds a job or a run (the others paused for the moment it
 * takes one), which must then end once all the same.
 */
async function replace(fleet: Fleet, roll: Roll, old: Proc, to: Release): Promise<Proc> {
  const { role, release } = fleet.roleOf.get(old)!
  const startedAt = Date.now()
  const next = await fleet.spawn(role, to)
  await waitReady(next)
  const front = fleet.frontOf(role)
  front?.backends.push(backendOf(next))
  const readyMs = Date.now() - startedAt
  if (front) {
    const i = front.backends.findIndex((b) => b.name === old.name)
    if (i >= 0) front.backends.splice(i, 1)
    await sleep(PRESTOP_MS)
  }
  const stopAt = Date.now()
  const work = heldWork[role]
  let held = ''
  if (work) {
    const others = live(fleet, role).filter((p) => p !== old)
    const id = await stopMidWork(old, others, work.claimedSince, 'SIGTERM')
    roll[work.kind].set(id, `${old.name} (${release.name}) stopped holding`)
    held = `, holding ${id}`
  } else await killProc(old, 'SIGTERM')
  const exit = old.child.signalCode ?? String(old.child.exitCode)
  roll.stopped.push({ name: old.name, exit, ms: Date.now() - stopAt })
  step(
    roll,
    `${old.name} (${release.name}) -> ${next.name} (${to.name}): ready in ${(readyMs / 1000).toFixed(1)} s; the old one stopped (SIGTERM${held}) in ${((Date.now() - stopAt) / 1000).toFixed(1)} s, exit ${exit}`,
  )
  return next
}

const live = (fleet: Fleet, role: Role, release?: Release) =>
  procs.filter(
    (p) =>
      alive(p.child) && !p.killedOnPurpose && fleet.roleOf.get(p)?.role === role && (!release || fleet.roleOf.get(p)!.release === release),
  )

// ---------------------------------------------------------------------------------------------
// Checks of the roll itself
// ---------------------------------------------------------------------------------------------

/** every process stopped for the roll drained and exited 0 by itself, within the grace period */
function checkStops(roll: Roll): Check {
  const bad = roll.stopped.filter((s) => s.exit !== '0')
  const slowest = Math.max(0, ...roll.stopped.map((s) => s.ms))
  return {
    name: 'every replica replaced stopped gracefully on SIGTERM',
    pass: roll.stopped.length > 0 && bad.length === 0,
    detail: `${roll.stopped.length} stopped, ${roll.stopped.length - bad.length} exited 0 by themselves (the slowest in ${(slowest / 1000).toFixed(1)} s)${bad.length ? `; not: ${bad.map((s) => `${s.name} ${s.exit}`).join(', ')}` : ''}`,
  }
}

/** the fleet at the end runs what the roll meant: this tree but for the replicas rolled back */
function checkReleases(fleet: Fleet, from: Release): Check {
  const running = procs.filter((p) => alive(p.child) && !p.killedOnPurpose)
  const old = running.filter((p) => fleet.roleOf.get(p)?.release === from)
  const rolledBack = new Set(old.map((p) => fleet.roleOf.get(p)!.role))
  const expected = ROLL_BACK.every((role) => rolledBack.has(role)) && old.length === ROLL_BACK.length
  return {
    name: 'the fleet runs this tree, but for the replicas rolled back',
    pass: expected,
    detail: `${running.length} processes: ${running.length - old.length} of this tree, ${old.length} of ${from.name} (${old.map((p) => p.name).join(', ')})`,
  }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

async function main(): Promise<boolean> {
  const runDir = mkdtempSync(join(tmpdir(), 'rehearse-upgrade-'))
  processSettings.runDir = runDir
  say(`logs: ${runDir}`)
  const prev = previousRelease()
  const subject = git('log', '-1', '--format=%s', prev.sha).slice(0, 100)
  const oldVersion = (JSON.parse(git('show', `${prev.sha}:package.json`)) as { version?: string }).version ?? 'none'
  const newVersion = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: string }).version ?? 'none'
  const head = git('rev-parse', '--short', 'HEAD')
  const dirty = git('status', '--porcelain', '--untracked-files=no') !== ''
  say(
    `from ${prev.ref} (${prev.sha.slice(0, 10)}, ${prev.why}), version ${oldVersion}; to this tree (${head}${dirty ? ' with uncommitted changes' : ''}), version ${newVersion}`,
  )

  const [checkout, infra] = await Promise.all([
    checkOut(prev.sha, runDir),
    startInfrastructure({ runDir, namespace: NAMESPACE, sentinel: true }),
  ])
  say(`${prev.ref} checked out and installed in ${checkout.tree} in ${(checkout.ms / 1000).toFixed(1)} s`)
  const notes: string[] = []
  const from = await releaseOf(prev.ref, checkout.tree, infra.redis, notes)
  for (const note of notes) say(note)

  // settlement on, every 500 ms: the payments are settled on chain while the fleet is rolled
  const fleet = await startFleet(infra, {
    release: from,
    settings: { admin: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '500' } },
  })
  cleanups.push(() => {
    for (const f of fleet.fronts) f.close()
  })
  const { ctx, payers, stopAutomations } = await prepareClients(infra.devnet, fleet)
  // the chain from here on is the rehearsal's
  const startBlock = Number(await rpc<string>(infra.devnet.rpcUrl, 'eth_blockNumber', []))

  say(`load: ${RATE.prompt} paid prompts/s, ${RATE.paidRead} paid reads/s, ${RATE.keyed} keyed reads/s; 4 automations buying every 3 s`)
  setPhase(`on ${from.name}`)
  const loads = [steady(ctx, 'prompt', RATE.prompt), steady(ctx, 'paidRead', RATE.paidRead), steady(ctx, 'keyed', RATE.keyed)]
  await sleep(HOLD_MS)

  const roll = newRoll()
  const rollStarted = Date.now()
  for (const role of ROLL_ORDER) {
    setPhase(`roll ${role}`)
    for (const old of live(fleet, role, from)) await replace(fleet, roll, old, thisTree)
  }
  step(roll, `every deployable runs this tree (the roll took ${((Date.now() - rollStarted) / 1000).toFixed(1)} s)`)
  setPhase('on this tree')
  await sleep(HOLD_MS)

  for (const role of ROLL_BACK) {
    setPhase(`roll back ${role}`)
    const [one] = live(fleet, role, thisTree)
    if (one) await replace(fleet, roll, one, from)
  }
  step(roll, `rolled back to ${from.name}: one replica of ${ROLL_BACK.join(' and ')}, against this tree's schema`)
  setPhase('rolled back')
  await sleep(HOLD_MS)

  const skipped = (await Promise.all(loads.map((l) => l.stop()))).reduce((a, b) => a + b, 0)
  say(`load stopped: ${samples.length} requests${skipped ? ` (${skipped} not sent: 200 in flight)` : ''}`)
  await finalRound(ctx)
  await stopAutomations()
  await settle(samples.filter((s) => s.nonce && ok2xx(s)).length, { settlement: true })
  writeFileSync(join(runDir, 'samples.json'), JSON.stringify(samples))

  const underLoad = samples.filter((s) => !s.final).length
  out('')
  out(`Upgrade rehearsal (pnpm rehearse:upgrade), ${new Date().toISOString()}`)
  out(
    `from: ${from.name} (${prev.sha.slice(0, 10)} "${subject}"), version ${oldVersion}: ${prev.why}; checked out and installed in ${(checkout.ms / 1000).toFixed(1)} s`,
  )
  out(`to:   this tree (${head}${dirty ? ' with uncommitted changes' : ''}), version ${newVersion}`)
  out(
    'fleet: 3 NATS nodes (JETSTREAM_REPLICAS=3), Redis under Sentinel, Postgres (a server of its own), devnet; 2 gateways behind a round-robin front, 2 x admin/trading/market-data/agent API/automation API (each pair behind a front),',
  )
  out(
    '       2 agent workers, 3 automation schedulers; each component with its own NATS user and Postgres role; admin settlement on (every 500 ms)',
  )
  out(`per-version settings: ${notes.length ? '' : 'none'}`)
  for (const note of notes) out(`  ${note}`)
  out(
    `load: ${RATE.prompt} paid prompts/s + ${RATE.paidRead} paid reads/s (x402) + ${RATE.keyed} keyed reads/s; 4 automations every 3 s; ${underLoad} requests under load, ${samples.length - underLoad} in the final round`,
  )
  out(`steps (maxSurge 1, maxUnavailable 0; preStop ${PRESTOP_MS / 1000} s):`)
  for (const line of roll.lines) out(`  ${line}`)
  books.reportFrontsAndLatency(fleet.fronts)

  const common = await books.checkBooks({
    devnet: infra.devnet,
    startBlock,
    cluster: infra.cluster,
    jobs: roll.jobs,
    runs: roll.runs,
    settlements: await books.settlementTransactions(),
    errors: { cutsAllowed: false, during: 'the upgrade' },
  })
  return books.concludeReport(
    [
      ...common,
      await books.checkSettlement(infra.devnet, startBlock, fleet.payTo, payers),
      checkStops(roll),
      checkReleases(fleet, from),
      await books.checkConsumers(infra.cluster, NAMESPACE),
    ],
    runDir,
  )
}

await runRehearsal(main)
