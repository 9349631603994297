import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { SentinelRedis } from '@ats/service-kit/testing'
import {
  checkBooks,
  concludeReport,
  elapsed,
  out,
  q,
  reportFrontsAndLatency,
  rpc,
  say,
  settle,
  streamsOf,
  until,
  type Check,
} from './rehearsal/books.ts'
import { claimedSince, prepareClients, startFleet, stopMidWork, type Fleet } from './rehearsal/fleet.ts'
import { cleanups, runRehearsal, startInfrastructure, type Infrastructure } from './rehearsal/infrastructure.ts'
import { finalRound, ok2xx, samples, setPhase, steady, type Sample } from './rehearsal/load.ts'
import { alive, killProc, processSettings, procs } from './rehearsal/processes.ts'

/**
 * pnpm rehearse: the fleet at scale on this machine, under load, with faults.
 *
 * A 3-node NATS cluster (JETSTREAM_REPLICAS=3), a private Redis under Sentinel (a primary, 2
 * replicas, 3 sentinels; one server with --single-redis), a Postgres server of its own and a devnet;
 * 2 gateways behind a round-robin front, 2 replicas of every service (each pair behind a front
 * of its own, as a Kubernetes Service would be), 2 agent workers and 3 automation schedulers.
 * With paid and keyed load running it kills, one at a time: a NATS node (SIGKILL, then back),
 * a gateway, an agent worker mid-job, an automation scheduler mid-run (all SIGKILL, left dead),
 * Postgres (its own server, crashed and started again after a few seconds), and the Redis primary (the sentinels promote a replica; with --single-redis, the one Redis for
 * a few seconds). Then it checks the books (the check… functions of scripts/rehearsal/books.ts
 * and those below), prints one line a check, and exits 1 when one fails. Every process's log is
 * kept in the run's directory. The fleet, its fronts, the load and the checks are shared with
 * pnpm rehearse:upgrade (scripts/rehearsal/).
 */

/** Load, per second: paid (x402) prompts and reads, keyed reads. Modest: ~20 processes share 2 cores. */
const RATE = { prompt: 4, paidRead: 2, keyed: 20 }
const FAULT_HOLD_MS = 10_000
const NAMESPACE = 'rehearse'
const REDIS_DOWN_MS = 4_000
/** how long Postgres stays down after its crash (a managed failover takes seconds to a minute) */
const POSTGRES_DOWN_MS = 5_000
/**
 * Sentinel by default, as production runs Redis (docs/operations.md): the failover is the fault
 * that matters there. --single-redis keeps one server, killed for REDIS_DOWN_MS and started empty.
 */
const SENTINEL = !process.argv.includes('--single-redis')

interface Faults {
  lines: string[]
  /** the job the killed worker was running */
  workerJob: string
  /** the run the killed scheduler was running */
  schedulerRun: string
  /** under Sentinel: what the Redis primary's SIGKILL did */
  redisFailover?: RedisFailover
  postgresRestart: PostgresRestart
}

interface PostgresRestart {
  downAt: number
  upAt: number
  /** the payments (nonces) and jobs recorded before the crash: every one must still be there after */
  paymentsBefore: string[]
  jobsBefore: string[]
  /** each live service process's time from Postgres back to /ready answering 200 again (undefined: not within 60 s) */
  readyAgainMs: Map<string, number | undefined>
}

interface RedisFailover {
  killedAt: number
  /** the ports of the killed primary and of the replica promoted, and how long the promotion took */
  first: number
  promoted: number
  promotedMs: number
  /** the rate-limit counts on the primary just before the kill, of windows with 10 s or more left, and on the promoted one */
  counts: Map<string, number>
  countsAfter: Map<string, number>
}

/** The gateways' rate-limit counts (ats-rl:…) on the primary now, of windows with 10 s or more left. */
const rateLimitCounts = (redis: SentinelRedis) =>
  redis.onPrimary(async (client) => {
    const counts = new Map<string, number>()
    for await (const keys of client.scanStream({ match: 'ats-rl:*', count: 500 })) {
      for (const key of keys as string[]) {
        const [count, ttl] = await Promise.all([client.get(key), client.pttl(key)])
        if (count !== null && ttl > 10_000) counts.set(key, Number(count))
      }
    }
    return counts
  })

/** The faults, one at a time, each held FAULT_HOLD_MS with the load running; `phase` labels what the load sees. */
async function injectFaults({ cluster, redis, postgres }: Infrastructure, { gateways, workers, schedulers }: Fleet): Promise<Faults> {
  const lines: string[] = []
  const fault = (line: string) => {
    lines.push(`${elapsed()}: ${line}`)
    say(line)
  }
  const hold = async (name: string, during: () => Promise<void>) => {
    setPhase(name)
    await during()
    await sleep(FAULT_HOLD_MS)
    setPhase('steady')
  }

  // a NATS node, SIGKILL: the leader of the payments stream; back after FAULT_HOLD_MS
  await hold('nats-node-killed', async () => {
    const payments = (await streamsOf(cluster)).find((s) => s.name === `${NAMESPACE}_payments`)
    const node = Math.max(0, cluster.names.indexOf(payments?.leader ?? ''))
    await cluster.kill(node)
    fault(`SIGKILL NATS node ${cluster.names[node]} (leader of stream ${payments?.name})`)
    await sleep(FAULT_HOLD_MS)
    await cluster.restart(node)
    fault(`NATS node ${cluster.names[node]} started again; the cluster is whole`)
  })

  await hold('gateway-killed', async () => {
    await killProc(gateways[1]!)
    fault('SIGKILL gateway-2 (left dead)')
  })

  let workerJob = ''
  await hold('worker-killed', async () => {
    workerJob = await stopMidWork(workers[1]!, [workers[0]!], claimedSince.job, 'SIGKILL')
    fault(`SIGKILL agent-worker-2 while it ran job ${workerJob} (left dead)`)
  })

  let schedulerRun = ''
  await hold('scheduler-killed', async () => {
    schedulerRun = await stopMidWork(schedulers[2]!, schedulers.slice(0, 2), claimedSince.run, 'SIGKILL')
    fault(`SIGKILL automation-scheduler-3 while it ran automation run ${schedulerRun} (left dead)`)
  })

  // Postgres crashed (immediate shutdown: every connection cut, crash recovery at the start) and
  // started again after POSTGRES_DOWN_MS, as a restart or a managed failover does
  let postgresRestart: PostgresRestart | undefined
  await hold('postgres-restart', async () => {
    const [payments, jobs] = await Promise.all([
      q<{ nonce: string }>('SELECT lower(nonce) AS nonce FROM admin.payments'),
      q<{ id: string }>('SELECT id FROM agent.jobs'),
    ])
    fault(`Postgres crashed (immediate shutdown, under load); down for ${POSTGRES_DOWN_MS / 1000} s`)
    const { downAt, upAt } = await postgres.crashAndRestart(POSTGRES_DOWN_MS)
    fault(`Postgres started again (crash recovery) after ${((upAt - downAt) / 1000).toFixed(1)} s`)
    const live = procs.filter((p) => !p.killedOnPurpose && alive(p.child))
    const readyAgainMs = new Map(
      await Promise.all(
        live.map(async (p) => {
          const ready = await until(
            `${p.name} ready`,
            async () =>
              (await fetch(`${p.readyUrl}/ready`, { signal: AbortSignal.timeout(2000) }).then(
                (r) => r.ok,
                () => false,
              ))
                ? true
                : undefined,
            60_000,
            100,
          ).then(
            () => Date.now() - upAt,
            () => undefined,
          )
          return [p.name, ready] as const
        }),
      ),
    )
    const slowest = Math.max(...[...readyAgainMs.values()].map((ms) => ms ?? Number.POSITIVE_INFINITY))
    fault(`every service process ready again ${(slowest / 1000).toFixed(1)} s after Postgres came back`)
    postgresRestart = {
      downAt,
      upAt,
      paymentsBefore: payments.map((r) => r.nonce),
      jobsBefore: jobs.map((r) => r.id),
      readyAgainMs,
    }
  })

  let redisFailover: RedisFailover | undefined
  if ('sentinels' in redis) {
    await hold('redis-failover', async () => {
      const first = await redis.primaryPort()
      const counts = await rateLimitCounts(redis)
      await redis.kill(first)
      const killedAt = Date.now()
      fault(`SIGKILL the Redis primary :${first} (under paid and keyed load)`)
      const promoted = await until(
        'the sentinels to promote a replica',
        async () => {
          const now = await redis.primaryPort()
          return now === first ? undefined : now
        },
        30_000,
        100,
      )
      const promotedMs = Date.now() - killedAt
      fault(`the sentinels promoted the replica :${promoted}, ${(promotedMs / 1000).toFixed(1)} s after the kill`)
      const countsAfter = await rateLimitCounts(redis)
      await sleep(REDIS_DOWN_MS)
      await redis.restart(first)
      fault(`the old primary :${first} started again (empty), a replica of :${promoted}`)
      redisFailover = { killedAt, first, promoted, promotedMs, counts, countsAfter }
      setPhase('after-redis')
    })
    return { lines, workerJob, schedulerRun, postgresRestart: postgresRestart!, ...(redisFailover ? { redisFailover } : {}) }
  }
  await hold('redis-down', async () => {
    await redis.kill()
    fault(`SIGKILL Redis; down for ${REDIS_DOWN_MS / 1000} s`)
    await sleep(REDIS_DOWN_MS)
    await redis.start()
    fault('Redis started again (empty: it keeps nothing on disk)')
    setPhase('after-redis')
  })
  return { lines, workerJob, schedulerRun, postgresRestart: postgresRestart! }
}

/**
 * Under Sentinel, the Redis primary's SIGKILL under load: paid requests answered 2xx again within
 * seconds; every payment answered 2xx still has its nonce claimed on the promoted primary (none
 * was acknowledged by one primary alone), and the last ones before the kill, sent again, are
 * refused; keyed requests went on. Rate-limit counts are reported (not judged): those claimed in
 * the instant before the kill and not yet copied are lost, each window goes on.
 */
async function checkRedisFailover(redis: SentinelRedis, failover: RedisFailover, front: string): Promise<Check> {
  const { killedAt } = failover
  const paid = samples.filter((s) => s.nonce && ok2xx(s))
  // when the first request sent after the kill was answered 2xx (it may have waited for the promotion)
  const firstAfter = (kind: (s: Sample) => boolean) => {
    const answered = samples.filter((s) => kind(s) && ok2xx(s) && s.at >= killedAt).map((s) => s.at + s.ms)
    return answered.length ? Math.min(...answered) - killedAt : undefined
  }
  const resumedPaid = firstAfter((s) => s.kind !== 'keyed')
  const resumedKeyed = firstAfter((s) => s.kind === 'keyed')
  const claimed = await redis.onPrimary((client) =>
    Promise.all(paid.map((s) => client.exists(`ats-x402:${s.payer}:${s.nonce!.toLowerCase()}`))),
  )
  const forgotten = paid.filter((_, i) => claimed[i] === 0)
  // the last payments answered 2xx before the kill, sent again now: each must be refused
  const replayed = paid.filter((s) => s.at < killedAt).slice(-10)
  const statuses = await Promise.all(
    replayed.map(async (s) => (await fetch(`${front}/agent/skills`, { headers: { 'x-payment': s.payment! } })).status),
  )
  const acceptedTwice = statuses.filter((status) => status >= 200 && status < 300).length
  const keyedAfter = samples.filter((s) => s.kind === 'keyed' && s.phase === 'after-redis')
  let carried = 0
  const lost: number[] = []
  for (const [key, before] of failover.counts) {
    const after = failover.countsAfter.get(key)
    if (after !== undefined && after >= before) carried++
    else lost.push(before - (after ?? 0))
  }
  const fmt = (ms: number | undefined) => (ms === undefined ? 'never' : `${(ms / 1000).toFixed(1)} s`)
  return {
    name: 'the Redis primary killed: service resumes, no payment accepted twice, nothing acknowledged lost',
    pass:
      resumedPaid !== undefined &&
      resumedPaid < 15_000 &&
      forgotten.length === 0 &&
      replayed.length > 0 &&
      acceptedTwice === 0 &&
      keyedAfter.length > 0 &&
      keyedAfter.every(ok2xx),
    detail: `promoted :${failover.promoted} ${fmt(failover.promotedMs)} after the kill; a paid request sent after it answered 2xx ${fmt(resumedPaid)} after it, a keyed one ${fmt(resumedKeyed)}; ${paid.length} paid 2xx, nonces no longer claimed ${forgotten.length}; ${replayed.length} paid just before the kill sent again: accepted ${acceptedTwice} (${statuses.join(' ')}); keyed after the failover ${keyedAfter.filter(ok2xx).length}/${keyedAfter.length} 2xx`,
    more: [
      `rate limits: ${failover.counts.size} counts before the kill, ${carried} carried on to the promoted primary${lost.length ? `, ${lost.length} lower by ${lost.join(', ')}` : ''}; each window goes on`,
    ],
  }
}

/**
 * Postgres crashed under load and started again: every service process answers /ready again by
 * itself within seconds; every payment and job recorded before the crash is still there; while
 * it was down, what needs no database went on (the paid edge: x402 checks in Redis and on chain,
 * keys from the gateways' caches, payments to JetStream; market data from its caches) and what
 * needs it answered 503 {error} (judged with every other error by checkErrors).
 */
async function checkPostgresRestart(restart: PostgresRestart): Promise<Check> {
  const [payments, jobs] = await Promise.all([
    q<{ nonce: string }>('SELECT lower(nonce) AS nonce FROM admin.payments'),
    q<{ id: string }>('SELECT id FROM agent.jobs'),
  ])
  const paymentsNow = new Set(payments.map((r) => r.nonce))
  const jobsNow = new Set(jobs.map((r) => r.id))
  const lostPayments = restart.paymentsBefore.filter((n) => !paymentsNow.has(n)).length
  const lostJobs = restart.jobsBefore.filter((id) => !jobsNow.has(id)).length
  const notReady = [...restart.readyAgainMs].filter(([, ms]) => ms === undefined).map(([name]) => name)
  const slowest = Math.max(0, ...[...restart.readyAgainMs.values()].map((ms) => ms ?? 0))
  // sent while Postgres was down, by kind
  const during = samples.filter((s) => s.at >= restart.downAt && s.at < restart.upAt)
  const by = (kind: Sample['kind']) => {
    const of = during.filter((s) => s.kind === kind)
    return { all: of.length, ok: of.filter(ok2xx).length }
  }
  const [paidRead, keyed, prompt] = [by('paidRead'), by('keyed'), by('prompt')]
  return {
    name: 'Postgres crashed and restarted: every service reconnects by itself, nothing recorded is lost, the paid edge answers',
    pass:
      restart.readyAgainMs.size > 0 &&
      notReady.length === 0 &&
      slowest < 30_000 &&
      lostPayments === 0 &&
      lostJobs === 0 &&
      paidRead.all > 0 &&
      paidRead.ok === paidRead.all,
    detail: `${restart.readyAgainMs.size} service processes ready again within ${(slowest / 1000).toFixed(1)} s of Postgres back${notReady.length ? ` (not: ${notReady.join(', ')})` : ''}; recorded before the crash and still there: ${restart.paymentsBefore.length - lostPayments}/${restart.paymentsBefore.length} payments, ${restart.jobsBefore.length - lostJobs}/${restart.jobsBefore.length} jobs`,
    more: [
      `sent while it was down (${((restart.upAt - restart.downAt) / 1000).toFixed(1)} s): paid reads ${paidRead.ok}/${paidRead.all} 2xx, keyed reads ${keyed.ok}/${keyed.all} 2xx, paid prompts ${prompt.ok}/${prompt.all} 2xx (a job is written to the agent's database: 503 until it is back)`,
    ],
  }
}

function printHeader(faults: Faults, fleet: Fleet) {
  const underLoad = samples.filter((s) => !s.final).length
  out('')
  out(`Scale rehearsal (pnpm rehearse), ${new Date().toISOString()}`)
  out(
    'fleet: 3 NATS nodes (JETSTREAM_REPLICAS=3), 2 gateways behind a round-robin front, 2 x admin/trading/market-data/agent API/automation API,',
  )
  out(
    `       2 agent workers, 3 automation schedulers, Postgres (the run's own server), ${SENTINEL ? 'Redis under Sentinel (primary, 2 replicas, 3 sentinels)' : 'Redis (one server)'}, devnet; ${procs.length} service processes, each component with its own NATS user and Postgres role; admin settlement off`,
  )
  out(
    `load: ${RATE.prompt} paid prompts/s + ${RATE.paidRead} paid reads/s (x402) + ${RATE.keyed} keyed reads/s; 4 automations every 3 s; ${underLoad} requests under load, ${samples.length - underLoad} in the final round`,
  )
  out('faults:')
  for (const line of faults.lines) out(`  ${line}`)
  reportFrontsAndLatency(fleet.fronts)
}

async function main(): Promise<boolean> {
  const runDir = mkdtempSync(join(tmpdir(), 'rehearse-'))
  processSettings.runDir = runDir
  say(`logs: ${runDir}`)
  const infra = await startInfrastructure({ runDir, namespace: NAMESPACE, sentinel: SENTINEL })
  const fleet = await startFleet(infra)
  cleanups.push(() => {
    for (const f of fleet.fronts) f.close()
  })
  const { ctx, stopAutomations } = await prepareClients(infra.devnet, fleet)
  // the server wallet's transactions from here on are the rehearsal's
  const startBlock = Number(await rpc<string>(infra.devnet.rpcUrl, 'eth_blockNumber', []))

  say(`load: ${RATE.prompt} paid prompts/s, ${RATE.paidRead} paid reads/s, ${RATE.keyed} keyed reads/s; 4 automations buying every 3 s`)
  const loads = [steady(ctx, 'prompt', RATE.prompt), steady(ctx, 'paidRead', RATE.paidRead), steady(ctx, 'keyed', RATE.keyed)]
  await sleep(FAULT_HOLD_MS)
  const faults = await injectFaults(infra, fleet)
  const skipped = (await Promise.all(loads.map((l) => l.stop()))).reduce((a, b) => a + b, 0)
  say(`load stopped: ${samples.length} requests${skipped ? ` (${skipped} not sent: 200 in flight)` : ''}`)

  // recovery: a final round, nobody restarted by hand
  await finalRound(ctx)
  await stopAutomations()
  await settle(samples.filter((s) => s.nonce && ok2xx(s)).length)
  writeFileSync(join(runDir, 'samples.json'), JSON.stringify(samples))

  printHeader(faults, fleet)
  const checks = [
    ...(await checkBooks({
      devnet: infra.devnet,
      startBlock,
      cluster: infra.cluster,
      jobs: new Map([[faults.workerJob, "the killed worker's job"]]),
      runs: new Map([[faults.schedulerRun, "the killed scheduler's run"]]),
    })),
    await checkPostgresRestart(faults.postgresRestart),
    ...('sentinels' in infra.redis && faults.redisFailover
      ? [await checkRedisFailover(infra.redis, faults.redisFailover, fleet.front.url)]
      : []),
  ]
  return concludeReport(checks, runDir)
}

await runRehearsal(main)
