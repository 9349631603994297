import { createRequire } from 'node:module'
import type { ensureStream } from '@ats/service-kit'
import { identityHeaders, natsChannels } from '@ats/contracts'
// by path: the fake public APIs of market-data's tests (the bench's slow tool is "Alchemy")
import { startUpstreams } from '../services/market-data/test/upstreams.ts'
import { cleanups, runBench, startBase, startService, type ServiceProcess } from './fleet.ts'
import { assertPortFree, ready } from './processes.ts'

/**
 * pnpm bench:jobs (and the third part of pnpm bench): the agent's job pipeline, from the 202 of
 * POST /agent/prompt to the job's `complete` event, with the offline planner. The agent's API
 * (AGENT_ROLE=api), its workers (AGENT_ROLE=worker, one process or two), trading and
 * market-data each run as a process of their own on a devnet; prompts go straight to the
 * agent with the identity headers the gateway sends for a verified payer (x402's cost is the
 * gateway bench's), and completion is seen on the job's NATS event broadcast.
 *
 *   latency      one price prompt at a time ("price of ETH": prices from the devnet's pools,
 *                cached by market-data): p50 and p99 from the 202 to complete, one worker.
 *                Aim: p50 under 50 ms.
 *   throughput   jobs whose tool is slow (list_nfts against a stand-in of Alchemy's NFT API
 *                answering after BENCH_TOOL_MS): IN_FLIGHT jobs kept queued for BENCH_SECONDS,
 *                jobs/s with one worker process and with two (AGENT_WORKER_CONCURRENCY each).
 *                Aim: two workers give at least 1.6x the jobs/s of one.
 *
 * Settings (environment): BENCH_JOBS_LATENCY (200 jobs), BENCH_SECONDS (10), BENCH_TOOL_MS (1000),
 * BENCH_JOBS_CONCURRENCY (4 per worker), BENCH_JOBS_DEVNET_PORT (8694). About a minute.
 */
// `nats` is a dependency of @ats/service-kit, not of the root package (as in bench/jetstream.ts)
type NatsConnection = Parameters<typeof ensureStream>[0]
const { connect } = createRequire(new URL('../packages/service-kit/package.json', import.meta.url))('nats') as {
  connect(options: { servers: string }): Promise<NatsConnection>
}

const latencyJobs = Number(process.env.BENCH_JOBS_LATENCY ?? 200)
const seconds = Number(process.env.BENCH_SECONDS ?? 10)
const toolMs = Number(process.env.BENCH_TOOL_MS ?? 1000)
const concurrency = Number(process.env.BENCH_JOBS_CONCURRENCY ?? 4)
const devnetPort = Number(process.env.BENCH_JOBS_DEVNET_PORT ?? 8694)
const ports = { agent: 3931, trading: 3932, market: 3933, worker1: 3934, worker2: 3935 }

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!

await runBench(async () => {
  for (const port of Object.values(ports)) await assertPortFree(port)
  const base = await startBase({ devnetPort })
  const upstreams = await startUpstreams({ teardown: (fn: () => unknown) => cleanups.push(fn) } as never)
  upstreams.behave('/getNFTsForOwner', { delayMs: toolMs })
  const common = { ADDRESS_BOOK: base.addressBookPath, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' }
  const services: Array<[ServiceProcess, number]> = []
  const up = async (name: string, port: number, env: NodeJS.ProcessEnv) => {
    const service = await startService(base, name, port, { ...common, ...env })
    await ready(`http://127.0.0.1:${port}`, service)
    services.push([service, port])
    return service
  }
  await up('trading', ports.trading, { SERVER_WALLET_PRIVATE_KEY: base.devnet.accounts[0]!.privateKey })
  await up('market-data', ports.market, {
    NFT_SOURCE: 'alchemy',
    ALCHEMY_NFT_URL: upstreams.base.alchemyWithoutKey,
    ALCHEMY_API_KEY: 'bench-key',
  })
  await up('agent', ports.agent, { AGENT_ROLE: 'api' })
  const workerEnv = { AGENT_ROLE: 'worker', AGENT_WORKER_CONCURRENCY: String(concurrency) }
  await up('agent', ports.worker1, workerEnv)

  const nc = await connect({ servers: base.env.NATS_URL })
  cleanups.push(() => nc.close())
  const channels = natsChannels(base.chain.NATS_NAMESPACE).agent
  // a job may finish before its 202 is read: whichever side comes second settles it
  const completed = new Map<string, (at: number) => void>()
  const finishedAt = new Map<string, number>()
  const sub = nc.subscribe(channels.events('*').subject)
  void (async () => {
    for await (const m of sub) {
      const event = channels.events('x').message.decode(m.data)
      if (event.type === 'status' && ['complete', 'failed'].includes((event.data as { status: string }).status)) {
        const waiter = completed.get(event.jobId)
        if (waiter) waiter(performance.now())
        else finishedAt.set(event.jobId, performance.now())
      }
    }
  })()

  const payer = base.devnet.accounts[1]!.address
  const headers = {
    [identityHeaders.internalToken]: base.env.INTERNAL_TOKEN,
    [identityHeaders.ownerId]: payer,
    'content-type': 'application/json',
  }
  /** one job: ms from the 202 to its complete event */
  async function job(prompt: string): Promise<number> {
    const res = await fetch(`http://127.0.0.1:${ports.agent}/agent/prompt`, { method: 'POST', headers, body: JSON.stringify({ prompt }) })
    const accepted = performance.now()
    if (res.status !== 202) throw new Error(`POST /agent/prompt answered ${res.status} ${await res.text()}`)
    const { jobId } = (await res.json()) as { jobId: string }
    const done = finishedAt.get(jobId) ?? (await new Promise<number>((resolve) => completed.set(jobId, resolve)))
    completed.delete(jobId)
    finishedAt.delete(jobId)
    return done - accepted
  }

  for (let i = 0; i < 20; i++) await job('price of ETH') // warm-up
  const latencies: number[] = []
  for (let i = 0; i < latencyJobs; i++) latencies.push(await job('price of ETH'))
  latencies.sort((a, b) => a - b)
  const p50 = percentile(latencies, 50)
  const p99 = percentile(latencies, 99)

  let counter = 0
  const nftPrompt = () => `NFTs of 0x${(++counter).toString(16).padStart(40, '0')}`
  async function throughput(workers: number): Promise<{ jobsPerSecond: number; p50: number }> {
    const inFlight = workers * concurrency * 2
    const times: number[] = []
    const until = performance.now() + seconds * 1000
    const started = performance.now()
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (performance.now() < until) times.push(await job(nftPrompt()))
      }),
    )
    const elapsed = (performance.now() - started) / 1000
    times.sort((a, b) => a - b)
    return { jobsPerSecond: times.length / elapsed, p50: percentile(times, 50) }
  }
  await throughput(1) // warm-up
  const one = await throughput(1)
  await up('agent', ports.worker2, workerEnv)
  const two = await throughput(2)
  const ratio = two.jobsPerSecond / one.jobsPerSecond

  const ms = (n: number) => `${n.toFixed(1)} ms`
  console.log(`\njob pipeline (offline planner), 202 -> complete:`)
  console.log(
    `  latency, price prompt, one at a time, 1 worker (${latencyJobs} jobs): p50 ${ms(p50)}, p99 ${ms(p99)}   aim p50 < 50 ms: ${p50 < 50 ? 'met' : 'NOT met'}`,
  )
  console.log(`  throughput, tool answering in ${toolMs} ms, ${concurrency} jobs per worker:`)
  console.log(`    1 worker : ${one.jobsPerSecond.toFixed(1)} jobs/s (p50 ${ms(one.p50)})`)
  console.log(`    2 workers: ${two.jobsPerSecond.toFixed(1)} jobs/s (p50 ${ms(two.p50)})`)
  console.log(`    ratio ${ratio.toFixed(2)}x   aim >= 1.6x: ${ratio >= 1.6 ? 'met' : 'NOT met'}`)
  for (const [service, port] of services) console.log(`  problems logged on :${port}:\n${service.problems()}`)
})
