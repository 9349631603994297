import { spawnSync } from 'node:child_process'
import { request } from 'node:http'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { ensureStream } from '@ats/service-kit'
import { identityHeaders, natsChannels, type JobEvent } from '@ats/contracts'
import { cleanups, runBench, startBase, startService } from './fleet.ts'
import { machineMeter } from './harness/machine.ts'
import { assertPortFree, cpuMicros, pinLoadGenerator, ready } from './processes.ts'

/**
 * pnpm bench:streams (the last part of pnpm bench): thousands of open SSE streams on one agent
 * API process (AGENT_ROLE=api, no worker, so every job stays pending). BENCH_STREAMS clients, each
 * a payer of its own, open GET /agent/job/:id/events (plain HTTP, keep-alive off, opened in
 * batches) and hold them while the agent is idle; then the jobs are completed the way a worker
 * completes them, the final status event stored (one SQL transaction for all) and broadcast on
 * NATS, and every client waits for its `complete` event and the end of its stream.
 *
 *   memory       the agent's RSS before and after the streams were opened, per stream
 *   idle CPU     the agent's CPU (and Postgres's) over BENCH_IDLE_SECONDS with every stream open.
 *                Aim: under 5% of a core.
 *   completion   ms from the broadcast's first publish to the last stream's final event, and to
 *                its close. Aim: under 1 s for all of them.
 *   missed       BENCH_STREAMS_SILENT more streams whose jobs are completed without a broadcast
 *                (a lost publish): ms until the last one ends, bounded by the agent's safety-net poll.
 *
 * Settings (environment): BENCH_STREAMS (2000), BENCH_STREAMS_SILENT (200), BENCH_IDLE_SECONDS
 * (10), BENCH_STREAMS_DEVNET_PORT (8696). About a minute.
 */
type NatsConnection = Parameters<typeof ensureStream>[0]
// `nats` and `pg` are dependencies of @ats/service-kit, not of the root package (as in bench/jobs.ts)
const kitRequire = createRequire(new URL('../packages/service-kit/package.json', import.meta.url))
const { connect } = kitRequire('nats') as { connect(options: { servers: string }): Promise<NatsConnection> }
const { Client } = kitRequire('pg') as {
  Client: new (options: {
    connectionString: string
  }) => {
    connect(): Promise<void>
    query<R>(text: string, values?: unknown[]): Promise<{ rows: R[] }>
    end(): Promise<void>
  }
}

const streams = Number(process.env.BENCH_STREAMS ?? 2000)
const silent = Number(process.env.BENCH_STREAMS_SILENT ?? 200)
const idleSeconds = Number(process.env.BENCH_IDLE_SECONDS ?? 10)
const devnetPort = Number(process.env.BENCH_STREAMS_DEVNET_PORT ?? 8696)
const port = 3960
const openBatch = 100

/** The open-file limit of this process (its children inherit it): each stream is a socket on both sides. */
function assertFileLimit(needed: number) {
  const limit = Number(spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim())
  if (Number.isFinite(limit) && limit < needed)
    throw new Error(`ulimit -n is ${limit}; ${streams + silent} streams need about ${needed}: raise it (ulimit -n ${needed}) and run again`)
}

const rssBytes = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** One client's stream: when it saw its job's final event and when the stream ended. */
interface Follower {
  jobId: string
  finalAt?: number
  closedAt?: number
  error?: string
  /** the end of what the stream sent, for the message when it did not end */
  seen: string
}

/** Opens the job's event stream; resolves once the headers are in (200), rejects otherwise. */
function follow(jobId: string, headers: Record<string, string>): Promise<Follower> {
  const follower: Follower = { jobId, seen: '' }
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: `/agent/job/${jobId}/events`, headers, agent: false }, (res) => {
      if (res.statusCode !== 200) {
        res.resume()
        return reject(new Error(`GET /agent/job/${jobId}/events answered ${res.statusCode}`))
      }
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        if (follower.finalAt !== undefined) return
        follower.seen = (follower.seen + chunk).slice(-2048)
        // the stored event's keys come back from Postgres in its order: status after result
        if (/event: status\ndata: \{[^\n]*"status":"complete"/.test(follower.seen)) follower.finalAt = performance.now()
      })
      res.on('end', () => (follower.closedAt = performance.now()))
      res.on('error', (error) => (follower.error = error.message))
      resolve(follower)
    })
    req.on('error', reject)
    req.end()
  })
}

await runBench(async () => {
  assertFileLimit(streams + silent + 512)
  await assertPortFree(port)
  const pinned = pinLoadGenerator()
  const base = await startBase({ devnetPort })
  const agent = await startService(base, 'agent', port, { AGENT_ROLE: 'api', LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' })
  await ready(`http://127.0.0.1:${port}`, agent)
  const nc = await connect({ servers: base.env.NATS_URL })
  cleanups.push(() => nc.close())
  const db = new Client({ connectionString: base.env.DATABASE_URL })
  await db.connect()
  cleanups.push(() => db.end())
  const channels = natsChannels(base.chain.NATS_NAMESPACE).agent

  let payers = 0
  const headersOf = () => ({
    [identityHeaders.internalToken]: base.env.INTERNAL_TOKEN,
    [identityHeaders.ownerId]: `0x${(++payers).toString(16).padStart(40, '0')}`,
  })
  /** `count` pending jobs, each of a payer of its own, with their streams open */
  async function openStreams(count: number): Promise<Follower[]> {
    const followers: Follower[] = []
    for (let i = 0; i < count; i += openBatch) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(openBatch, count - i) }, async () => {
          const headers = headersOf()
          const res = await fetch(`http://127.0.0.1:${port}/agent/prompt`, {
            method: 'POST',
            headers: { ...headers, 'content-type': 'application/json' },
            body: JSON.stringify({ prompt: 'price of ETH' }),
          })
          if (res.status !== 202) throw new Error(`POST /agent/prompt answered ${res.status} ${await res.text()}`)
          const { jobId } = (await res.json()) as { jobId: string }
          return follow(jobId, headers)
        }),
      )
      followers.push(...batch)
    }
    return followers
  }

  /** Stores `complete` as each job's final status event, in one transaction, as a worker would; the events stored */
  async function complete(jobIds: string[]): Promise<JobEvent[]> {
    const result = { text: 'ETH trades at 3012.45 USDC.', steps: 2, toolCalls: ['get_price'], transactions: [] }
    const { rows } = await db.query<{ job_id: string; seq: number; created_at: Date }>(
      `WITH done AS (
         UPDATE agent.jobs SET status = 'complete', result = $2::jsonb, event_seq = event_seq + 1, updated_at = now()
         WHERE id = ANY($1) RETURNING id, event_seq)
       INSERT INTO agent.job_events (job_id, seq, type, data) SELECT id, event_seq, 'status', $3::jsonb FROM done
       RETURNING job_id, seq, created_at`,
      [jobIds, JSON.stringify(result), JSON.stringify({ status: 'complete', result })],
    )
    return rows.map((r) => ({
      jobId: r.job_id,
      seq: r.seq,
      type: 'status',
      at: r.created_at.getTime(),
      data: { status: 'complete', result },
    }))
  }

  /**
   * Waits (up to `ms`) until every follower's stream ended; the ms from `since` to the last final
   * event and the last close, over the streams that ended with their complete event, and how many did.
   */
  async function ended(followers: Follower[], since: number, ms: number) {
    const deadline = performance.now() + ms
    while (followers.some((f) => f.closedAt === undefined) && performance.now() < deadline) await sleep(5)
    const done = followers.filter((f) => f.closedAt !== undefined && f.finalAt !== undefined)
    const stuck = followers.find((f) => !done.includes(f))
    if (stuck)
      console.log(`a stream that did not end (job ${stuck.jobId}) got:\n${stuck.seen}${stuck.error ? `\nerror: ${stuck.error}` : ''}`)
    return {
      count: done.length,
      lastFinal: Math.max(...done.map((f) => f.finalAt!)) - since,
      lastClose: Math.max(...done.map((f) => f.closedAt!)) - since,
    }
  }

  const rssBefore = rssBytes(agent.pid)
  const opening = performance.now()
  const followers = await openStreams(streams)
  const openSeconds = (performance.now() - opening) / 1000
  await sleep(2000)
  const rssAfter = rssBytes(agent.pid)

  const meter = machineMeter(['postgres'])
  const cpuBefore = cpuMicros(agent.pid)
  await sleep(idleSeconds * 1000)
  const agentIdle = (cpuMicros(agent.pid) - cpuBefore) / (idleSeconds * 1e4)
  const machine = meter.stop()
  if (followers.some((f) => f.closedAt !== undefined || f.error)) throw new Error('a stream ended while its job was pending')

  const stored = await complete(followers.map((f) => f.jobId))
  const since = performance.now()
  for (const event of stored) {
    const topic = channels.events(event.jobId)
    nc.publish(topic.subject, topic.message.encode(event))
  }
  const published = performance.now() - since
  const broadcast = await ended(followers, since, 30_000)

  const unseen = await openStreams(silent)
  await sleep(500)
  await complete(unseen.map((f) => f.jobId))
  const missed = await ended(unseen, performance.now(), 30_000)

  const ms = (n: number) => `${n.toFixed(0)} ms`
  const all = (e: { count: number }, of: number) =>
    e.count === of ? '' : `, ONLY ${e.count} of ${of} streams ended with their complete event within 30 s`
  console.log(`\n${streams} open SSE streams on one agent API process${pinned ? ' (bench on core 0, agent on core 1)' : ''}:`)
  console.log(`  opened in             ${openSeconds.toFixed(1)} s (job created, then its stream; ${openBatch} at a time)`)
  console.log(
    `  agent RSS             ${(rssBefore / 2 ** 20).toFixed(0)} MiB -> ${(rssAfter / 2 ** 20).toFixed(0)} MiB: ${((rssAfter - rssBefore) / streams / 1024).toFixed(1)} KiB per stream`,
  )
  console.log(
    `  idle CPU, ${idleSeconds} s       agent ${agentIdle.toFixed(2)}% of a core, Postgres ${machine.servicesPercent.toFixed(2)}%   aim < 5%: ${agentIdle < 5 ? 'met' : 'NOT met'}`,
  )
  console.log(
    `  completion, broadcast last final event ${ms(broadcast.lastFinal)}, last close ${ms(broadcast.lastClose)} (publishing took ${ms(published)})${all(broadcast, streams)}   aim < 1 s: ${broadcast.count === streams && broadcast.lastFinal < 1000 ? 'met' : 'NOT met'}`,
  )
  console.log(
    `  completion, no broadcast (${silent} streams) last final event ${ms(missed.lastFinal)}, last close ${ms(missed.lastClose)}${all(missed, silent)}`,
  )
  console.log(`  problems logged by the agent:\n${agent.problems()}`)
  if (broadcast.count !== streams || missed.count !== silent) throw new Error('streams did not end with their job')
})
