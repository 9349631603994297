import { runBench, startAgentGateway, startAdmin, startBase, startService, type ServiceProcess } from './fleet.ts'
import { assertPortFree, cpuMicros, cpuMicrosNamed, ready } from './processes.ts'

/**
 * pnpm bench:jobs:saturated (the fourth part of pnpm bench): what one job costs when the fleet is
 * kept busy. The offline price prompt ("price of ETH", model ats-planner) goes through the gateway
 * as a non-streamed POST /v1/chat/completions with a readwrite key: one request is one job, and
 * its answer comes when the job completes. CLIENTS clients each send the next request as soon as
 * the last is answered, for BENCH_SATURATED_SECONDS; the fleet is the gateway, admin, the agent's
 * API (AGENT_ROLE=api), one worker process (AGENT_ROLE=worker) and market-data on a devnet, all
 * on this machine with the load generator.
 *
 * Reported per client count: completed jobs/s; p50 and p99 from the request to its answer (the
 * job's 202 → complete, plus the gateway's hops); and CPU ms per job of each process, from
 * /proc/<pid>/stat before and after the run (Postgres: every `postgres` process; NATS: the
 * nats-server process). Aim: 100 jobs/s, or a CPU cost per job that would give it on two cores.
 *
 * Settings (environment): BENCH_SATURATED_CLIENTS (8,16,32), BENCH_SATURATED_SECONDS (20),
 * BENCH_SATURATED_WORKER_CONCURRENCY (64 jobs at once in the worker), BENCH_SATURATED_DEVNET_PORT
 * (8696). About a minute and a half.
 */
const clientCounts = (process.env.BENCH_SATURATED_CLIENTS ?? '8,16,32').split(',').map(Number)
const seconds = Number(process.env.BENCH_SATURATED_SECONDS ?? 20)
const workerConcurrency = Number(process.env.BENCH_SATURATED_WORKER_CONCURRENCY ?? 64)
const devnetPort = Number(process.env.BENCH_SATURATED_DEVNET_PORT ?? 8696)
const ports = { gateway: 3960, ops: 3961, admin: 3962, agent: 3963, worker: 3964, market: 3965 }
const cores = 2

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!

await runBench(async () => {
  for (const port of Object.values(ports)) await assertPortFree(port)
  const base = await startBase({ devnetPort })
  const logLevel = process.env.LOG_LEVEL ?? 'warn'
  const admin = await startAdmin(base, ports.admin, { LOG_LEVEL: logLevel })
  const market = await startService(base, 'market-data', ports.market, { LOG_LEVEL: logLevel })
  const agent = await startService(base, 'agent', ports.agent, { AGENT_ROLE: 'api', LOG_LEVEL: logLevel })
  const worker = await startService(base, 'agent', ports.worker, {
    AGENT_ROLE: 'worker',
    AGENT_WORKER_CONCURRENCY: String(workerConcurrency),
    LOG_LEVEL: logLevel,
  })
  const services: Array<[string, ServiceProcess, number]> = [
    ['admin', admin, ports.admin],
    ['market-data', market, ports.market],
    ['agent API', agent, ports.agent],
    ['agent worker', worker, ports.worker],
  ]
  for (const [, service, port] of services) await ready(`http://127.0.0.1:${port}`, service)
  const { process: gateway, key } = await startAgentGateway(base, ports, 'jobs-saturated', logLevel)

  const request = { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } }
  const body = JSON.stringify({ model: 'ats-planner', messages: [{ role: 'user', content: 'price of ETH' }] })
  /** one job through the gateway: ms from the request to its answer */
  async function job(): Promise<number> {
    const started = performance.now()
    const res = await fetch(`http://127.0.0.1:${ports.gateway}/v1/chat/completions`, { ...request, body })
    const text = await res.text()
    if (res.status !== 200 || !text.includes('ETH: $'))
      throw new Error(`POST /v1/chat/completions answered ${res.status} ${text.slice(0, 300)}`)
    return performance.now() - started
  }

  const measured: Array<[string, () => number]> = [
    ['gateway', () => cpuMicros(gateway.pid)],
    ['agent API', () => cpuMicros(agent.pid)],
    ['agent worker', () => cpuMicros(worker.pid)],
    ['market-data', () => cpuMicros(market.pid)],
    ['admin', () => cpuMicros(admin.pid)],
    ['Postgres', () => cpuMicrosNamed('postgres')],
    ['NATS', () => cpuMicrosNamed('nats-server')],
  ]
  async function run(clients: number, runSeconds: number) {
    const before = measured.map(([, read]) => read())
    const times: number[] = []
    const started = performance.now()
    const until = started + runSeconds * 1000
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (performance.now() < until) times.push(await job())
      }),
    )
    const elapsed = (performance.now() - started) / 1000
    const cpu = measured.map(([name, read], i) => [name, (read() - before[i]!) / 1000 / times.length] as const)
    times.sort((a, b) => a - b)
    return {
      clients,
      jobs: times.length,
      jobsPerSecond: times.length / elapsed,
      p50: percentile(times, 50),
      p99: percentile(times, 99),
      cpu,
    }
  }

  await run(Math.max(...clientCounts), 5) // warm-up: JIT, pools, market-data's cache
  const results = []
  for (const clients of clientCounts) results.push(await run(clients, seconds))

  const ms = (n: number) => `${n.toFixed(1)} ms`
  console.log(
    `\njobs at saturation: "price of ETH" (ats-planner) on POST /v1/chat/completions through the gateway, ${seconds} s per client count:`,
  )
  const names = measured.map(([name]) => name)
  console.log(`  clients  jobs/s   p50 ms   p99 ms   CPU ms per job: ${names.join(' / ')} / total`)
  for (const r of results) {
    const total = r.cpu.reduce((sum, [, v]) => sum + v, 0)
    const cells = r.cpu.map(([, v]) => v.toFixed(2)).join(' / ')
    console.log(
      `  ${String(r.clients).padStart(7)}  ${r.jobsPerSecond.toFixed(1).padStart(6)}  ${r.p50.toFixed(1).padStart(7)}  ${r.p99.toFixed(1).padStart(7)}   ${cells} / ${total.toFixed(2)}`,
    )
  }
  const best = results.reduce((a, b) => (b.jobsPerSecond > a.jobsPerSecond ? b : a))
  const total = best.cpu.reduce((sum, [, v]) => sum + v, 0)
  const bound = (cores * 1000) / total
  const [heaviest] = [...best.cpu].sort((a, b) => b[1] - a[1])
  console.log(
    `  best: ${best.jobsPerSecond.toFixed(1)} jobs/s with ${best.clients} clients (p50 ${ms(best.p50)}, p99 ${ms(best.p99)}); ` +
      `${total.toFixed(2)} CPU ms per job in all, so ${cores} cores bound it at ${bound.toFixed(0)} jobs/s; heaviest: ${heaviest![0]} ${heaviest![1].toFixed(2)} ms`,
  )
  console.log(
    `  aim >= 100 jobs/s: ${best.jobsPerSecond >= 100 ? 'met' : bound >= 100 ? 'met by the CPU bound, not by the run' : 'NOT met'}`,
  )
  for (const [name, service] of services) console.log(`  problems logged by ${name}:\n${service.problems()}`)
})
