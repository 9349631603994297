import type autocannon from 'autocannon'
import { cleanups, createKey, gatewayEnv, runBench, startAdmin, startBase, startMarketData } from './fleet.ts'
import { autocannonRound } from './harness/autocannon.ts'
import { printReport } from './harness/report.ts'
import { type Ratio, type RoundResult, runInterleaved, type Target } from './harness/rounds.ts'
import { positiveSetting } from './harness/settings.ts'
import { summarize } from './harness/stats.ts'
import { openPaymentsStream } from './jetstream.ts'
import { signPayments } from './payments.ts'
import { assertPortFree, cpuMicros, pinLoadGenerator, ready, start } from './processes.ts'

/**
 * pnpm bench: requests/s and p99 of a keyed route through the gateway (auth with the key cache,
 * Redis rate limit, identity headers, logging, metrics) next to the same route through a bare
 * @fastify/http-proxy, and of a paid x402 route (payment header decoded, EIP-3009 signature
 * recovered, payer balance from the devnet chain, cached; nonce claimed in Redis), in one run on
 * this machine. Every server is its own process; autocannon runs in this one. Where taskset
 * exists, the load generator gets core 0 and the servers core 1, so the two sides do not steal
 * each other's time. The same run measures the real market-data service's cached GET /market/prices
 * behind a gateway, against the keyed route (aim: 90% of its throughput). (`pnpm bench` then runs
 * bench/quote.ts: GET /swap/quote through the gateway.)
 *
 * Method (bench/harness/rounds.ts): one warm-up round, not counted, then BENCH_ROUNDS rounds; each round
 * runs the targets one after another for BENCH_SECONDS each, always in the order bare, shape (the bare
 * proxy with the gateway's hooks and headers as no-ops), keyed, market, keyed with the access log off, paid. Each ratio is computed per round against the denominator's
 * runs adjacent in time (keyed against the bare runs just before and after it, paid against the
 * keyed runs just before and after it) and reported as the median with min..max over the rounds,
 * with a verdict on its aim: met, not met, or spread too wide to judge. Every run also records what
 * the machine did besides (steal time, CPU of processes outside the bench); runs during which
 * other processes used 20% of a core or more are marked disturbed, and the medians leave the
 * rounds they touched out when enough undisturbed rounds remain. The summary says when a median
 * cannot be expected to repeat within about 5 points, and why.
 *
 * A paid request spends its payment (the nonce is claimed), so each one carries a payment of its
 * own: BENCH_PAID_RPS × BENCH_SECONDS × (BENCH_ROUNDS + 1 warm-up) are signed before the timed
 * runs, at most BENCH_PAID_MAX. Each charged request is also published to JetStream (a stream of
 * the bench's own, deleted at the end) and recorded by the admin service (settlement off), which
 * runs on the servers' core like the rest and so competes with the gateway during paid runs: its
 * CPU per paid request is printed, and after a paid run the next run starts only once the admin
 * has recorded every payment of it.
 *
 * Settings (environment):
 *   BENCH_SECONDS      4        length of each timed run (one target in one round), s
 *   BENCH_ROUNDS       9        counted rounds after the warm-up round; the medians are over these
 *   BENCH_CONNECTIONS  50       concurrent autocannon connections
 *   BENCH_PAID_RPS     6000     paid requests/s to sign payments for (above what one core verifies)
 *   BENCH_PAID_MAX     300000   at most this many payments are signed
 *   BENCH_DEVNET_PORT  8691     the devnet's (anvil's) port
 *   LOG_LEVEL          info     the deployed gateway's and the admin's log level (the "log off" gateway runs at warn)
 *   BENCH_TARGETS      (all)    the targets to run, comma-separated: bare,shape,keyed,market,log off,paid (ratios need both sides)
 *   BENCH_GATEWAY_NODE_OPTIONS  NODE_OPTIONS of the deployed gateway only (port 3900: keyed and paid), e.g.
 *                               '--import ./bench/cpuProfile.mjs' for a CPU profile (PROFILE_DIR), written when the bench ends
 *   BENCH_MARKET_NODE_OPTIONS   the same for the market-data service behind the "market" target (port 3906)
 * With the defaults the rounds take about 3 minutes, plus 30-40 s (more on a busy machine) to
 * start the servers and sign the payments.
 */
const duration = positiveSetting('BENCH_SECONDS', 4)
const connections = positiveSetting('BENCH_CONNECTIONS', 50)
const rounds = positiveSetting('BENCH_ROUNDS', 9)
const paidRps = Number(process.env.BENCH_PAID_RPS ?? 6000)
const maxPayments = Number(process.env.BENCH_PAID_MAX ?? 300_000)
const devnetPort = Number(process.env.BENCH_DEVNET_PORT ?? 8691)
const only = process.env.BENCH_TARGETS?.split(',').map((name) => name.trim())
/** the bare proxy's CPU µs per request on this machine on a quiet day (2026-11-21, docs/benchmarks.md) */
const QUIET_BARE_CPU = 85
/** the readwrite tier's limit in the bench's gateways: the check under load exhausts it */
const LIMITED_KEY_MAX = 40

const pinned = pinLoadGenerator()

/** A target whose result also carries the market-data process's CPU per request (same core as the gateway). */
function marketTarget(target: Target, pid: number): Target {
  return {
    ...target,
    async run(options) {
      const before = cpuMicros(pid)
      const result = await target.run(options)
      result.extra = { ...result.extra, 'market-data CPU µs/req': (cpuMicros(pid) - before) / result.requests }
      return result
    },
  }
}

/** Pre-signed X-PAYMENT headers, each sent once. */
class PaymentPool {
  private used = 0
  exhausted = false
  constructor(private readonly headers: string[]) {}
  get size() {
    return this.headers.length
  }
  get left() {
    return this.headers.length - this.used
  }
  /** the next unused header, or undefined when all are spent */
  next(): string | undefined {
    if (this.used >= this.headers.length) return undefined
    const header = this.headers[this.used]!
    this.headers[this.used++] = '' // spent: let it be collected
    return header
  }
}

/** autocannon requests giving every request a payment of its own; ends the round (`stop`) when the pool runs dry */
function paidRequests(payments: PaymentPool, stop: () => void): autocannon.Request[] {
  let last = ''
  return [
    {
      // called for every request autocannon sends (and once per connection up front)
      setupRequest(request) {
        const header = payments.next()
        if (header === undefined) {
          payments.exhausted = true
          stop()
        } else last = header
        // out of payments: resend a spent one (402) until the stop takes effect; reported by the caller
        request.headers = { ...request.headers, 'x-payment': header ?? last }
        return request
      },
    },
  ]
}

async function main() {
  for (const port of [3900, 3901, 3902, 3903, 3905, 3906, 3910, 3912, 3913])
    await assertPortFree(port, 'the bench needs 3900-3903, 3905, 3906, 3910, 3912 and 3913')
  // a database, a NATS namespace and a devnet of the bench's own (bench/fleet.ts); the devnet is
  // the chain the paid route reads payer balances from (anvil, mostly idle: balances are cached)
  const base = await startBase({ devnetPort })
  const { env, devnet } = base
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')?.address
  if (!usdc) throw new Error('the devnet address book has no USDC')
  const payTo = devnet.accounts[9]!.address
  const payers = devnet.accounts.slice(1, 9) // each funded with 1,000,000 USDC

  // how many payments, and how long they must stay valid: signing, then every run of every row
  const rows = 6
  const wanted = Math.ceil(paidRps * duration * (rounds + 1)) + 3 // + the acceptance check (its replay reuses it) and the check under load
  const count = Math.min(wanted, maxPayments)
  const validFor = Math.ceil(count * 500e-6) + (rounds + 1) * rows * (duration + 3) + 120
  // the gateway accepts validBefore up to PAYMENT_TIMEOUT_SECONDS + 600 s ahead
  const paymentTimeout = Math.max(60, validFor - 600 + 30)

  const { stream: paymentsStream, ledgerConsumer } = base.payments
  const natsUrl = env.NATS_URL

  const upstream = (await start('bench/upstream.ts', {}, 'pipe')).address
  const bare = await start('bench/bareProxy.ts', { UPSTREAM: upstream, PORT: '3901' }, 'pipe')
  // the bare proxy with the gateway's hooks and headers and none of its work: what Fastify and Node charge for the shape
  const shape = await start('bench/bareProxy.ts', { UPSTREAM: upstream, PORT: '3907', SHAPED: '1' }, 'pipe')
  // the admin records the charged payments (one ledger write per batch); settling them on the
  // devnet would add a transaction per request on anvil, so settlement is off
  const admin = await startAdmin(
    base,
    3905,
    process.env.BENCH_ADMIN_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_ADMIN_NODE_OPTIONS } : {},
  )
  const gatewaySettings = gatewayEnv(base, 'http://127.0.0.1:3905', {
    MARKET_DATA_URL: upstream,
    AGENT_URL: upstream,
    RATE_LIMIT_READONLY: '1000000000',
    // the check under load: a readwrite key is limited as deployed (a small window's worth here)
    RATE_LIMIT_READWRITE: String(LIMITED_KEY_MAX),
    // one client address and one payer send every paid request of a round
    PAID_RATE_LIMIT_PER_ADDRESS: '1000000000',
    PAID_RATE_LIMIT_PER_PAYER: '1000000000',
    // BENCH_CONNECTIONS may be set above the in-flight caps
    MAX_CONCURRENT_PER_KEY: '100000',
    MAX_CONCURRENT_PER_ADDRESS: '100000',
    PAY_TO: payTo,
    PAYMENT_TIMEOUT_SECONDS: String(paymentTimeout),
    // below PAYMENT_TIMEOUT_SECONDS (60 at the least here); the payments signed up front keep more than this to the end
    PAYMENT_MIN_VALIDITY_SECONDS: '30',
    SKIP_PAYMENT: 'false',
  })
  // the same gateway twice: as deployed (access log at info) and with the access log off
  // OPS_PORT: where a gateway that keeps /ready and /metrics off its public port answers them
  const profiled = process.env.BENCH_GATEWAY_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_GATEWAY_NODE_OPTIONS } : {}
  const gateway = await start('gateway/src/server.ts', { ...gatewaySettings, ...profiled, PORT: '3900', OPS_PORT: '3910' }, 'ignore')
  const quiet = await start('gateway/src/server.ts', { ...gatewaySettings, PORT: '3902', OPS_PORT: '3912', LOG_LEVEL: 'warn' }, 'ignore')
  // the real market-data service (its devnet sources, Redis cache) behind a gateway of its own
  const marketData = await startMarketData(
    base,
    3906,
    process.env.BENCH_MARKET_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_MARKET_NODE_OPTIONS } : {},
  )
  const marketGateway = await start(
    'gateway/src/server.ts',
    { ...gatewaySettings, MARKET_DATA_URL: 'http://127.0.0.1:3906', PORT: '3903', OPS_PORT: '3913' },
    'ignore',
  )

  // sign here (core 0) while the servers start (core 1)
  const signStarted = performance.now()
  const now = BigInt(Math.floor(Date.now() / 1000))
  const headers = signPayments({
    count,
    payers,
    payTo,
    usdc,
    chainId: devnet.chainId,
    value: 10_000n, // the gateway's default PAYMENT_PRICE
    validAfter: now - 60n,
    validBefore: now + BigInt(validFor),
  })
  const signSeconds = (performance.now() - signStarted) / 1000
  const payments = new PaymentPool(headers)

  await ready('http://127.0.0.1:3905', admin)
  await ready(['http://127.0.0.1:3910', 'http://127.0.0.1:3900'], gateway)
  await ready(['http://127.0.0.1:3912', 'http://127.0.0.1:3902'], quiet)
  await ready('http://127.0.0.1:3906', marketData)
  await ready(['http://127.0.0.1:3913', 'http://127.0.0.1:3903'], marketGateway)

  const key = await createKey(base, 'http://127.0.0.1:3900', 'readonly')

  // one pre-signed payment must pass, and its replay must not: the paid runs measure real verification
  const paidUrl = 'http://127.0.0.1:3900/agent/skills'
  const probe = payments.next()!
  const accepted = await fetch(paidUrl, { headers: { 'x-payment': probe } })
  if (accepted.status !== 200)
    throw new Error(`a pre-signed payment was refused: GET /agent/skills answered ${accepted.status} ${await accepted.text()}`)
  await accepted.body?.cancel()
  const replay = await fetch(paidUrl, { headers: { 'x-payment': probe } })
  if (replay.status !== 402)
    throw new Error(`a replayed payment was not refused: GET /agent/skills answered ${replay.status} ${await replay.text()}`)
  await replay.body?.cancel()

  // the admin's ledger consumer: a paid run leaves a backlog of payment events behind, and the
  // next run (another row) must not pay for recording them
  const ledger = await openPaymentsStream(natsUrl, paymentsStream, ledgerConsumer)
  cleanups.push(() => ledger.close())
  const ledgerCaughtUp = async (timeoutMs = Math.max(60_000, duration * 10_000)) => {
    try {
      return await ledger.caughtUp(timeoutMs)
    } catch (error) {
      throw new Error(`${(error as Error).message}\nadmin warnings and errors:\n${admin.problems()}`)
    }
  }
  // the accepted payment above must reach the ledger; when the admin records nothing at all the
  // bench goes on (the gateway's figures still mean something) but says so loudly, twice
  let ledgerBroken: string | undefined
  try {
    await ledgerCaughtUp(10_000)
  } catch (error) {
    ledgerBroken = (error as Error).message
    console.warn(`WARNING: the admin records no payments, so the paid runs leave out its ledger work:\n${ledgerBroken}`)
  }
  const keyedHeaders = { authorization: `Bearer ${key}` }
  // the cache is warm before the runs; it then expires every MARKET_CACHE_TTL_MS like in production
  const warm = await fetch('http://127.0.0.1:3903/market/prices', { headers: keyedHeaders })
  if (warm.status !== 200) throw new Error(`GET /market/prices through the gateway answered ${warm.status} ${await warm.text()}`)
  await warm.body?.cancel()
  /** a keyed or bare target: GET /market/prices, the CPU of the proxy process (bare or gateway) per request */
  const proxied = (name: string, label: string, url: string, pid: number, headers: Record<string, string> = {}): Target => ({
    name,
    label,
    run: ({ seconds }) => autocannonRound({ name: label, url, seconds, connections, headers, pid }),
  })
  const paid: Target = {
    name: 'paid',
    label: 'gateway, paid (x402), GET /agent/skills',
    async run({ seconds }) {
      const adminBefore = cpuMicros(admin.pid)
      let stop = () => {}
      const result: RoundResult = await autocannonRound({
        name: 'gateway, paid (x402)',
        url: paidUrl,
        seconds,
        connections,
        pid: gateway.pid,
        requests: paidRequests(payments, () => stop()),
        onStart: (stopRound) => (stop = stopRound),
        probeHeaders: () => ({ 'x-payment': payments.next() ?? '' }),
      }).catch((error: Error) => {
        throw payments.exhausted ? outOfPayments() : error
      })
      if (payments.exhausted) throw outOfPayments()
      // the next run (another target) must not pay for recording this one's payments
      if (!ledgerBroken) {
        const catchUpMs = await ledgerCaughtUp()
        result.extra = { 'admin CPU µs/paid req': (cpuMicros(admin.pid) - adminBefore) / result.requests, 'admin catch-up ms': catchUpMs }
      }
      return result
    },
  }
  const outOfPayments = () =>
    new Error(
      `${paidUrl}: ran out of pre-signed payments (all ${payments.size} signed are spent, the last by this run): ` +
        `the paid route answered more than BENCH_PAID_RPS=${paidRps} requests/s; raise BENCH_PAID_RPS (and BENCH_PAID_MAX) or lower BENCH_SECONDS/BENCH_ROUNDS`,
    )

  console.log(pinned ? 'autocannon on core 0, servers on core 1' : 'taskset not found: processes not pinned')
  console.log(
    `signed ${count} x402 payments in ${signSeconds.toFixed(1)} s (${payers.length} payers; ` +
      `${paidRps} requests/s × ${duration} s × ${rounds + 1} runs${count < wanted ? `, capped by BENCH_PAID_MAX from ${wanted}` : ''}); ` +
      'one was accepted and refused when replayed',
  )
  console.log(
    `a warm-up round, then ${rounds} rounds of bare, shape, keyed, market-data, keyed (log off), paid; ${duration} s each, ${connections} connections; ` +
      'GET /market/prices (bare and keyed: a fixed answer; market-data: the real service, cached), GET /agent/skills (paid, one payment per request)',
  )
  const allTargets = [
    proxied('bare', 'bare @fastify/http-proxy', `${bare.address}/market/prices`, bare.pid),
    proxied('shape', "bare, with the gateway's hooks and headers as no-ops", `${shape.address}/market/prices`, shape.pid),
    proxied('keyed', 'gateway, keyed (readonly key)', 'http://127.0.0.1:3900/market/prices', gateway.pid, keyedHeaders),
    marketTarget(
      proxied('market', 'gateway, keyed, to market-data (cached)', 'http://127.0.0.1:3903/market/prices', marketGateway.pid, keyedHeaders),
      marketData.pid,
    ),
    proxied('log off', 'gateway, keyed, LOG_LEVEL=warn', 'http://127.0.0.1:3902/market/prices', quiet.pid, keyedHeaders),
    paid,
  ]
  const targets = only ? allTargets.filter((t) => only.includes(t.name)) : allTargets
  if (only && targets.length !== only.length)
    throw new Error(`BENCH_TARGETS names unknown targets: ${only.join(',')}; known: ${allTargets.map((t) => t.name).join(',')}`)
  const report = await runInterleaved({
    rounds,
    seconds: duration,
    targets,
    ratios: (
      [
        { name: 'keyed / bare', numerator: 'keyed', denominator: 'bare', aim: 85 },
        // the floor: the gateway's shape alone (bench/bareProxy.ts SHAPED=1), and the gateway's own code over it
        { name: 'shape / bare', numerator: 'shape', denominator: 'bare' },
        { name: 'keyed / shape', numerator: 'keyed', denominator: 'shape' },
        { name: 'market-data cached / keyed', numerator: 'market', denominator: 'keyed', aim: 90 },
        { name: 'keyed, log off / bare', numerator: 'log off', denominator: 'bare' },
        { name: 'paid / keyed', numerator: 'paid', denominator: 'keyed', aim: 60 },
        // the same two from CPU per request (bare µs ÷ keyed µs): the servers' own cost, whatever time other processes take from their core
        { name: 'keyed / bare, by CPU µs', numerator: 'keyed', denominator: 'bare', metric: 'cpu' },
        { name: 'paid / keyed, by CPU µs', numerator: 'paid', denominator: 'keyed', metric: 'cpu' },
      ] as Ratio[]
    ).filter((r) => targets.some((t) => t.name === r.numerator) && targets.some((t) => t.name === r.denominator)),
  })
  printReport(report)
  if (targets.some((t) => t.name === 'keyed')) {
    await checksUnderLoad({
      keyedUrl: 'http://127.0.0.1:3900/market/prices',
      keyedHeaders,
      gatewayPid: gateway.pid,
      limitedKey: await createKey(base, 'http://127.0.0.1:3900', 'readwrite', 'bench rate-limit check'),
      paidUrl,
      nextPayment: () => payments.next(),
    })
  }
  console.log(
    '(CPU µs/req: user + system CPU of the proxy process, bare or gateway, per request; admin CPU: the ledger consumer, same core)',
  )
  // how fast the machine is today: the bare proxy's CPU per request was 81-85 µs on a quiet day (docs/benchmarks.md)
  const bareCpu = summarize(
    report.measurements.filter((m) => m.target === 'bare').map((m) => m.result.cpuMicrosPerRequest ?? Number.NaN),
  ).median
  if (bareCpu > QUIET_BARE_CPU * 1.5)
    console.log(
      `NOTE the bare proxy took ${bareCpu.toFixed(0)} µs of CPU per request (median), ${(bareCpu / QUIET_BARE_CPU).toFixed(1)} × the ~${QUIET_BARE_CPU} µs ` +
        'of a quiet day on this machine: the host or other processes slow every server now; compare ratios only, and expect them to wander more',
    )

  const { published, pending } = await ledger.backlog()
  if (ledgerBroken)
    console.warn(
      `WARNING: the admin recorded none of the ${published} stream messages (${pending} pending): ` +
        'the paid figures leave out the ledger consumer that shares the servers core; see the warning above',
    )
  else console.log(`${published} stream messages in all (payments are batched while a publish is in flight)`)
  console.log(`${payments.left} of ${payments.size} signed payments left unspent`)
}

interface UnderLoad {
  keyedUrl: string
  keyedHeaders: Record<string, string>
  gatewayPid: number
  /** a readwrite key, limited to LIMITED_KEY_MAX requests a window */
  limitedKey: string
  paidUrl: string
  nextPayment: () => string | undefined
}

/**
 * What the rounds do not exercise, checked while the deployed gateway is under the keyed load
 * (50 connections): the rate-limit and request-id headers, a key over its limit refused with 429
 * and retry-after, a payment accepted and its replay refused. The bench fails when one does not hold.
 */
async function checksUnderLoad({ keyedUrl, keyedHeaders, gatewayPid, limitedKey, paidUrl, nextPayment }: UnderLoad) {
  const seconds = 4
  const load = autocannonRound({ name: 'load for the checks', url: keyedUrl, seconds, connections, headers: keyedHeaders, pid: gatewayPid })
  await new Promise((resolve) => setTimeout(resolve, 1000))
  const failures: string[] = []
  const check = (ok: boolean, what: string) => {
    if (!ok) failures.push(what)
  }
  // headers of a keyed answer
  const keyed = await fetch(keyedUrl, { headers: keyedHeaders })
  await keyed.body?.cancel()
  check(keyed.status === 200, `a keyed request answered ${keyed.status}`)
  for (const name of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'x-request-id'])
    check(keyed.headers.get(name) !== null, `a keyed answer lacks ${name}`)
  // a key over its limit
  const statuses: number[] = []
  let retryAfter: string | null = null
  for (let i = 0; i < LIMITED_KEY_MAX + 5; i++) {
    const res = await fetch(keyedUrl, { headers: { authorization: `Bearer ${limitedKey}` } })
    const body = await res.text()
    statuses.push(res.status)
    if (res.status === 429) {
      retryAfter = res.headers.get('retry-after')
      check(body.includes('"error"'), `a 429 has no {error}: ${body.slice(0, 120)}`)
    }
  }
  const served = statuses.filter((s) => s === 200).length
  check(served === LIMITED_KEY_MAX, `a key limited to ${LIMITED_KEY_MAX} requests was served ${served} times of ${statuses.length}`)
  check(
    statuses.slice(LIMITED_KEY_MAX).every((s) => s === 429),
    `requests over the limit answered ${statuses.slice(LIMITED_KEY_MAX).join(',')}, not 429`,
  )
  check(retryAfter !== null && Number(retryAfter) > 0, `a 429 over the limit has retry-after ${retryAfter}`)
  // a payment, then its replay
  const payment = nextPayment()
  if (payment === undefined) failures.push('no signed payment left for the replay check')
  else {
    const first = await fetch(paidUrl, { headers: { 'x-payment': payment } })
    await first.body?.cancel()
    const replay = await fetch(paidUrl, { headers: { 'x-payment': payment } })
    const body = await replay.text()
    check(first.status === 200, `a fresh payment answered ${first.status}`)
    check(replay.status === 402 && body.includes('"error"'), `its replay answered ${replay.status} ${body.slice(0, 120)}`)
  }
  const result = await load
  if (failures.length > 0) throw new Error(`checks under load failed:\n- ${failures.join('\n- ')}`)
  console.log(
    `checks under load (${Math.round(result.rps)} keyed req/s meanwhile): rate-limit and request-id headers present; ` +
      `a key limited to ${LIMITED_KEY_MAX} served ${LIMITED_KEY_MAX}, then 429 with retry-after ${retryAfter} s; a payment accepted, its replay refused with 402`,
  )
}

await runBench(main)
