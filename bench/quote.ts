import type autocannon from 'autocannon'
import { identityHeaders } from '@ats/contracts'
import { join } from 'node:path'
import { closeSync, openSync } from 'node:fs'
import { createKey, gatewayEnv, logProblems, runBench, startAdmin, startBase } from './fleet.ts'
import { autocannonRound } from './harness/autocannon.ts'
import { printReport } from './harness/report.ts'
import { type RoundResult, runInterleaved, type Target } from './harness/rounds.ts'
import { positiveSetting } from './harness/settings.ts'
import { summarize } from './harness/stats.ts'
import { assertPortFree, childrenNamed, cpuMicros, pinLoadGenerator, pinToServerCore, ready, start } from './processes.ts'

/**
 * pnpm bench:quote (and the second half of pnpm bench): requests/s and p99 of GET /swap/quote
 * through the gateway, and what bounds it. The devnet (anvil), the admin service (it makes the
 * readwrite key), the trading service and the gateway each run as a process of their own;
 * autocannon runs in this one. Where taskset exists, autocannon gets core 0 and every server,
 * anvil included, core 1: the servers' core then carries the whole cost of a request, and the
 * CPU each process used per request (read from /proc) says which of them bounds the throughput.
 *
 * The trading service quotes with the DEX's on-chain quoter (an eth_call to anvil per candidate
 * path, plus slot0 reads) and caches: pool addresses, the latest block number for
 * QUOTE_BLOCK_CACHE_MS (250 ms), and every quote per (dex, tokens, amount, block). Targets:
 *   hit          the same quote (1 WETH → USDC on Uniswap) on every request, through the gateway:
 *                after the first request every answer comes from the trading service's memory
 *                (the devnet mines no block during the bench, so the block number does not move)
 *   miss         through the gateway, every request with an amountIn never asked before (autocannon
 *                setupRequest): every request goes to the chain
 *   miss direct  the same miss load straight to the trading service (with the internal token and
 *                the identity headers the gateway would send): what the gateway adds to a miss
 *
 * Method (bench/harness/rounds.ts): one warm-up round, not counted, then BENCH_QUOTE_ROUNDS rounds of the
 * three targets in the order hit, miss, miss direct, BENCH_SECONDS each; medians with min..max
 * over the rounds, and runs during which other processes took CPU marked disturbed.
 *
 * Settings (environment):
 *   BENCH_SECONDS            4     length of each timed run, s
 *   BENCH_QUOTE_ROUNDS       5     counted rounds after the warm-up round
 *   BENCH_CONNECTIONS        50    concurrent autocannon connections
 *   BENCH_QUOTE_DEVNET_PORT  8692  the devnet's (anvil's) port
 *   LOG_LEVEL                info  the gateway's, trading's and admin's log level (as deployed: an access-log line per request)
 * With the defaults the bench takes about 1 min 40 s: 18 runs of 4 s, plus ~20 s to start and stop.
 */
const duration = positiveSetting('BENCH_SECONDS', 4)
const rounds = positiveSetting('BENCH_QUOTE_ROUNDS', 5)
const connections = positiveSetting('BENCH_CONNECTIONS', 50)
const devnetPort = Number(process.env.BENCH_QUOTE_DEVNET_PORT ?? 8692)

const GATEWAY = 'http://127.0.0.1:3920'
const TRADING = 'http://127.0.0.1:3922'
const ADMIN = 'http://127.0.0.1:3925'
const QUOTE = '/swap/quote?tokenIn=WETH&tokenOut=USDC&dex=uniswap'
/** the hit target's amount: 1 WETH */
const HIT_AMOUNT = 10n ** 18n
/** the miss targets' amounts: 0.1 WETH plus a counter (wei), never the same twice in a run */
const MISS_BASE = 10n ** 17n

const pinned = pinLoadGenerator()

interface Servers {
  gateway: number
  trading: number
  anvil: number
}

/** the per-request figures each run adds (RoundResult.extra) */
const CPU_GATEWAY = 'gateway µs/req'
const CPU_TRADING = 'trading µs/req'
const CPU_ANVIL = 'anvil µs/req'
const SERVERS_BUSY = 'servers core %'
const LOAD_BUSY = 'autocannon core %'

/**
 * A target: autocannon against `url` (with `requests` when every request differs), and the CPU of
 * the gateway, trading and anvil per request, how busy the servers' core was (their CPU ÷ the
 * run's wall time) and how busy the load generator (this process) was.
 */
function quoteTarget(
  name: string,
  label: string,
  url: string,
  servers: Servers,
  headers: Record<string, string>,
  requests?: () => autocannon.Request[],
): Target {
  return {
    name,
    label,
    async run({ seconds }) {
      const before = { gateway: cpuMicros(servers.gateway), trading: cpuMicros(servers.trading), anvil: cpuMicros(servers.anvil) }
      const loadBefore = process.cpuUsage()
      const started = performance.now()
      const result: RoundResult = await autocannonRound({
        name: label,
        url,
        seconds,
        connections,
        headers,
        ...(requests ? { requests: requests() } : {}),
      })
      const wallMicros = (performance.now() - started) * 1000
      const load = process.cpuUsage(loadBefore)
      const used = {
        gateway: cpuMicros(servers.gateway) - before.gateway,
        trading: cpuMicros(servers.trading) - before.trading,
        anvil: cpuMicros(servers.anvil) - before.anvil,
      }
      const total = used.gateway + used.trading + used.anvil
      result.cpuMicrosPerRequest = total / result.requests
      result.extra = {
        [CPU_GATEWAY]: used.gateway / result.requests,
        [CPU_TRADING]: used.trading / result.requests,
        [CPU_ANVIL]: used.anvil / result.requests,
        [SERVERS_BUSY]: (total / wallMicros) * 100,
        [LOAD_BUSY]: ((load.user + load.system) / wallMicros) * 100,
      }
      return result
    },
  }
}

/** What bounds a target, from the medians of its runs: a saturated core (and whose CPU fills it), or waiting. */
function boundOf(label: string, runs: RoundResult[]): string {
  const median = (pick: (r: RoundResult) => number | undefined) => summarize(runs.map((r) => pick(r) ?? Number.NaN)).median
  const rps = median((r) => r.rps)
  const shares = [
    ['gateway', median((r) => r.extra?.[CPU_GATEWAY])],
    ['trading', median((r) => r.extra?.[CPU_TRADING])],
    ['anvil', median((r) => r.extra?.[CPU_ANVIL])],
  ] as const
  const total = shares.reduce((sum, [, us]) => sum + us, 0)
  const [topName, topUs] = [...shares].sort((a, b) => b[1] - a[1])[0]!
  const servers = median((r) => r.extra?.[SERVERS_BUSY])
  const loadGen = median((r) => r.extra?.[LOAD_BUSY])
  const split = shares.map(([name, us]) => `${name} ${us.toFixed(0)}`).join(' + ')
  const head = `${label}: ${rps.toFixed(0)} req/s; ${split} = ${total.toFixed(0)} µs of server CPU per request`
  if (pinned && servers >= 85)
    return (
      `${head}. Bound by the servers' core (${servers.toFixed(0)}% busy): one core affords ~${(1e6 / total).toFixed(0)} of these a second, ` +
      `and ${topName} takes ${((topUs / total) * 100).toFixed(0)}% of it`
    )
  if (pinned && loadGen >= 85)
    return `${head}. Bound by the load generator: autocannon kept its core ${loadGen.toFixed(0)}% busy; the servers' core was ${servers.toFixed(0)}% busy`
  return (
    `${head}. No core saturated (servers ${servers.toFixed(0)}%, autocannon ${loadGen.toFixed(0)}%${pinned ? '' : ', not pinned'}): ` +
    `bound by waiting; ${connections} connections at ${rps.toFixed(0)} req/s is ${((connections / rps) * 1000).toFixed(1)} ms per request on average`
  )
}

async function main() {
  for (const port of [3920, 3922, 3925, 3930]) await assertPortFree(port, 'the quote bench needs 3920, 3922, 3925 and 3930')
  // a database, a NATS namespace and a devnet of the bench's own (bench/fleet.ts)
  const base = await startBase({ devnetPort })
  // the devnet started anvil from this (pinned) process: move it to the servers' core, where the cost of a quote is
  const [anvil, ...more] = childrenNamed('anvil')
  if (anvil === undefined || more.length > 0)
    throw new Error(`expected one anvil child process, found ${[anvil, ...more].filter(Boolean).length}`)
  if (pinned && !pinToServerCore(anvil)) throw new Error(`taskset could not move anvil (pid ${anvil}) to the servers' core`)

  const admin = await startAdmin(base, 3925)
  const tradingLog = join(base.dir, 'trading.log')
  const tradingLogFd = openSync(tradingLog, 'w')
  // no SERVER_WALLET_PRIVATE_KEY: quotes need none (execute would answer 503)
  const trading = await start(
    'services/trading/src/server.ts',
    { ...base.env, ...base.chain, ADDRESS_BOOK: base.addressBookPath, PORT: '3922', HOST: '127.0.0.1' },
    tradingLogFd,
  )
  closeSync(tradingLogFd)
  const gateway = await start(
    'gateway/src/server.ts',
    gatewayEnv(base, ADMIN, {
      TRADING_URL: TRADING,
      RATE_LIMIT_READWRITE: '1000000000',
      MAX_CONCURRENT_PER_KEY: '100000',
      MAX_CONCURRENT_PER_ADDRESS: '100000',
      PORT: '3920',
      OPS_PORT: '3930',
    }),
    'ignore',
  )
  await ready(ADMIN, admin)
  await ready(TRADING, trading)
  await ready(['http://127.0.0.1:3930', GATEWAY], gateway)
  const key = await createKey(base, GATEWAY, 'readwrite')

  const keyed = { authorization: `Bearer ${key}` }
  // what the gateway sends the trading service besides the request (the key id is the label's stand-in)
  const internal = {
    [identityHeaders.internalToken]: base.env.INTERNAL_TOKEN,
    [identityHeaders.tier]: 'readwrite',
    [identityHeaders.keyId]: 'bench',
  }

  // the answers the runs measure are real quotes: the same through the gateway and straight, a new amount a new quote
  const quote = async (url: string, headers: Record<string, string>) => {
    const res = await fetch(url, { headers })
    const body = await res.text()
    if (res.status !== 200) throw new Error(`GET ${url} answered ${res.status} ${body.slice(0, 300)}`)
    return JSON.parse(body) as { amountIn: string; amountOut: string; route: string[]; pools: string[]; blockNumber: string }
  }
  const viaGateway = await quote(`${GATEWAY}${QUOTE}&amountIn=${HIT_AMOUNT}`, keyed)
  const direct = await quote(`${TRADING}${QUOTE}&amountIn=${HIT_AMOUNT}`, internal)
  if (viaGateway.amountOut !== direct.amountOut)
    throw new Error(`the gateway and the trading service quote differently: ${viaGateway.amountOut} and ${direct.amountOut}`)
  const other = await quote(`${GATEWAY}${QUOTE}&amountIn=${2n * HIT_AMOUNT}`, keyed)
  if (other.amountOut === viaGateway.amountOut)
    throw new Error('two amounts were quoted the same amountOut: is the quote cache keyed by amount?')

  let missCount = 0n
  /** every request a new amountIn (autocannon calls setupRequest for every request it sends) */
  const misses = (): autocannon.Request[] => [
    {
      setupRequest(request) {
        request.path = `${QUOTE}&amountIn=${MISS_BASE + ++missCount}`
        return request
      },
    },
  ]
  const servers: Servers = { gateway: gateway.pid, trading: trading.pid, anvil }
  const targets = [
    quoteTarget('hit', 'gateway, the same quote (cache hit)', `${GATEWAY}${QUOTE}&amountIn=${HIT_AMOUNT}`, servers, keyed),
    quoteTarget(
      'miss',
      'gateway, a new amountIn each request (cache miss)',
      `${GATEWAY}${QUOTE}&amountIn=${MISS_BASE}`,
      servers,
      keyed,
      misses,
    ),
    quoteTarget(
      'miss direct',
      'trading service without the gateway, cache miss',
      `${TRADING}${QUOTE}&amountIn=${MISS_BASE}`,
      servers,
      internal,
      misses,
    ),
  ]

  console.log(pinned ? 'autocannon on core 0; gateway, trading, anvil (and admin) on core 1' : 'taskset not found: processes not pinned')
  console.log(
    `quote: ${viaGateway.amountIn} wei WETH → ${viaGateway.amountOut} USDC base units on Uniswap (route ${viaGateway.route.join(' → ')}, ` +
      `pool ${viaGateway.pools.join(', ')}) at block ${viaGateway.blockNumber}`,
  )
  console.log(
    `a warm-up round, then ${rounds} rounds of hit, miss, miss direct; ${duration} s each, ${connections} connections; GET ${QUOTE}&amountIn=…`,
  )
  const report = await runInterleaved({
    rounds,
    seconds: duration,
    targets,
    ratios: [
      { name: 'miss / hit', numerator: 'miss', denominator: 'hit' },
      { name: 'miss, gateway / direct', numerator: 'miss', denominator: 'miss direct' },
      { name: 'miss, gateway / direct, by CPU µs', numerator: 'miss', denominator: 'miss direct', metric: 'cpu' },
    ],
  })
  printReport(report)
  console.log(
    "(CPU µs/req: the servers' CPU per request, gateway + trading + anvil, from /proc; servers core %: that CPU over the run's wall time, " +
      '100% = core 1 full; autocannon core %: this process, core 0)',
  )
  const final = await quote(`${GATEWAY}${QUOTE}&amountIn=${HIT_AMOUNT}`, keyed)
  console.log(
    `${missCount} distinct amounts were quoted by the miss runs; the head stayed at block ${final.blockNumber}` +
      (final.blockNumber === viaGateway.blockNumber
        ? ' all along (no block mined), so every hit was a hit'
        : ` (was ${viaGateway.blockNumber})`),
  )
  console.log('\nwhat bounds each target (medians over the rounds):')
  const runsOf = (name: string) => report.measurements.filter((m) => m.target === name).map((m) => m.result)
  for (const target of targets) console.log(`  ${boundOf(target.name, runsOf(target.name))}`)
  const cpu = (name: string, figure: string) => summarize(runsOf(name).map((r) => r.extra?.[figure] ?? Number.NaN)).median
  const delta = (a: string, b: string, figure: string) => {
    const d = cpu(a, figure) - cpu(b, figure)
    return `${d < 0 ? '−' : '+'}${Math.abs(d).toFixed(0)}`
  }
  console.log(
    `  a miss over a hit, through the gateway: trading ${delta('miss', 'hit', CPU_TRADING)} µs (the quoter call: viem, JSON-RPC over HTTP), ` +
      `anvil ${delta('miss', 'hit', CPU_ANVIL)} µs (executing the eth_call), gateway ${delta('miss', 'hit', CPU_GATEWAY)} µs (same work, fewer requests a second)`,
  )
  console.log(`  the gateway in front of a miss: ${cpu('miss', CPU_GATEWAY).toFixed(0)} µs of its CPU per request`)
  console.log(`\ntrading service warnings and errors:\n${logProblems(tradingLog)}`)
  console.log(`admin warnings and errors:\n${admin.problems()}`)
}

await runBench(main)
