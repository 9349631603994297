import { readdirSync, readFileSync } from 'node:fs'
import { basename } from 'node:path'
import autocannon from 'autocannon'
import { cpuMicros } from './processes.ts'

/**
 * The bench harness: short timed runs of every target, interleaved round after round (a, b, c,
 * a, b, c, …) after a warm-up round that is not counted, and every ratio reported as the median
 * over the rounds with its min..max, judged against its aim. One long run per target says little
 * on a machine whose speed drifts by tens of percent within minutes; short interleaved rounds put
 * the same drift on both sides of a ratio, and a median leaves out the rounds a neighbour spoiled.
 *
 * A bench declares its targets (a name and a function that runs one timed run, usually with
 * `autocannonRound`) and its ratios (numerator / denominator, optionally an aim in percent):
 *
 *   const report = await runInterleaved({
 *     rounds: 9,
 *     seconds: 4,
 *     targets: [
 *       { name: 'bare', run: ({ seconds }) => autocannonRound({ name: 'bare', url: bareUrl, seconds, connections: 50, pid: bare.pid }) },
 *       { name: 'cached', run: ({ seconds }) => autocannonRound({ name: 'cached', url: cachedUrl, seconds, connections: 50, pid: gateway.pid }) },
 *     ],
 *     ratios: [{ name: 'cached / bare', numerator: 'cached', denominator: 'bare', aim: 90 }],
 *   })
 *   printReport(report)
 *
 * How a ratio is made:
 * - per round: the numerator's run divided by the denominator's runs adjacent to it in time (the
 *   mean of the nearest one before and the nearest one after, where both exist), so a slow or
 *   fast stretch of the machine lands on both sides;
 * - during every run the harness reads /proc: the hypervisor's steal time, the CPU of the shared
 *   services (Redis, NATS, Postgres) and the CPU of every other process outside the bench (not
 *   this process or its descendants). A run is "disturbed" when those others used at least
 *   `disturbedAt` % of a core (default 20) or steal was at least 5%; a round's ratio is disturbed
 *   when any run it came from was;
 * - the median and min..max are over the undisturbed rounds when there are enough of them (at
 *   least half the rounds, and 3), else over all rounds, and the summary says which;
 * - `judge` gives the verdict on the aim: met, not met, or spread too wide to judge; and when the
 *   rounds spread over more than `maxSpread` points the summary says the median may not repeat,
 *   and why (the outside load it saw, or none).
 */

/** What one timed run of a target measured. */
export interface RoundResult {
  /** requests per second (mean over the run) */
  rps: number
  /** 99th percentile latency, ms */
  p99: number
  /** requests answered in the run */
  requests: number
  /** CPU (user + system) the server process under test used per request, µs */
  cpuMicrosPerRequest?: number
  /** further figures of the run (name → value), printed and summarised like the others */
  extra?: Record<string, number>
}

export interface RoundContext {
  /** 0 for the warm-up round, then 1..rounds */
  round: number
  warmUp: boolean
  /** how long the run should load the target */
  seconds: number
}

export interface Target {
  /** short name, used by ratios and in every line */
  name: string
  /** a longer description for the summary */
  label?: string
  run(context: RoundContext): Promise<RoundResult>
}

export interface Ratio {
  /** e.g. 'keyed / bare' */
  name: string
  numerator: string
  denominator: string
  /**
   * 'rps' (default): numerator req/s ÷ denominator req/s. 'cpu': denominator CPU µs/request ÷
   * numerator CPU µs/request, the share of the denominator's throughput the numerator would keep
   * if only the server's own CPU cost limited it.
   */
  metric?: 'rps' | 'cpu'
  /** the aim in percent: the ratio should be at least this */
  aim?: number
}

export interface JudgeOptions {
  /**
   * Points. When the rounds straddle the aim and spread over more than this, there is no verdict;
   * and above it the summary warns that the median may not repeat (a median of 7-9 rounds moves
   * by up to about half the spread from run to run). Default 10.
   */
  maxSpread?: number
  /** Points. When min..max reaches more than this below and above the aim, there is no verdict. Default 3. */
  straddle?: number
}

export interface HarnessOptions extends JudgeOptions {
  targets: Target[]
  ratios: Ratio[]
  /** counted rounds (a warm-up round comes first) */
  rounds: number
  /** seconds per target per round */
  seconds: number
  /** 'fixed' (default): every round runs the targets in the order given; 'rotate': round i starts at target i */
  order?: 'fixed' | 'rotate'
  /**
   * Names (as in /proc/<pid>/stat) of shared services outside the bench's process tree that the
   * targets use: their CPU is shown as "services", not counted as outside load. Default:
   * redis-server, nats-server, postgres.
   */
  services?: string[]
  /** % of one core: a run during which other processes used at least this much is disturbed. Default 20. */
  disturbedAt?: number
  log?: (line: string) => void
}

/** What the machine did besides the bench during one run. */
export interface MachineLoad {
  seconds: number
  /** share of all CPUs' time the hypervisor gave to someone else, % */
  stealPercent: number
  /** CPU used by processes outside the bench (and not one of the shared services), % of one core */
  othersPercent: number
  /** CPU used by the shared services (Redis, NATS, Postgres), % of one core */
  servicesPercent: number
  /** the biggest of the others (% of one core), largest first */
  topOthers: Array<{ name: string; percent: number }>
}

export interface Measurement {
  target: string
  round: number
  /** position in time over the whole run */
  seq: number
  result: RoundResult
  machine: MachineLoad
  disturbed: boolean
}

export interface Summary {
  n: number
  median: number
  min: number
  max: number
}

export interface Verdict {
  outcome: 'met' | 'not met' | 'too wide'
  text: string
}

export interface RatioReport {
  ratio: Ratio
  /** round → ratio in percent */
  perRound: Map<number, number>
  /** round → the runs its ratio came from (the numerator's and the adjacent denominator's) */
  sources: Map<number, Measurement[]>
  /** rounds whose ratio came from a disturbed run */
  disturbed: Set<number>
  /** which rounds the summary is over: the undisturbed ones, or all (too few undisturbed) */
  over: 'undisturbed' | 'all'
  summary: Summary
  verdict?: Verdict
}

export interface Report {
  options: HarnessOptions
  measurements: Measurement[]
  ratios: RatioReport[]
  /** total wall time of the rounds (warm-up included), s */
  seconds: number
}

const DEFAULT_SERVICES = ['redis-server', 'nats-server', 'postgres']
const DEFAULT_MAX_SPREAD = 10
const DEFAULT_STRADDLE = 3
const DEFAULT_DISTURBED_AT = 20
/** steal that disturbs a run, % */
const DISTURBING_STEAL = 5

// ---- statistics ----

export function summarize(values: number[]): Summary {
  const xs = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b)
  const n = xs.length
  if (n === 0) return { n, median: Number.NaN, min: Number.NaN, max: Number.NaN }
  const median = n % 2 === 1 ? xs[(n - 1) / 2]! : (xs[n / 2 - 1]! + xs[n / 2]!) / 2
  return { n, median, min: xs[0]!, max: xs[n - 1]! }
}

/**
 * The verdict on "at least `aim`" from the rounds' values (percent): met when every round reached
 * it, not met when none did; when they straddle it, no verdict if they spread over more than
 * `maxSpread` points or reach more than `straddle` points past the aim on both sides, else the
 * median decides.
 */
export function judge(values: number[], aim: number, { maxSpread = DEFAULT_MAX_SPREAD, straddle = DEFAULT_STRADDLE }: JudgeOptions = {}): Verdict {
  const { n, median, min, max } = summarize(values)
  if (n === 0) return { outcome: 'too wide', text: 'no rounds to judge' }
  const below = values.filter((x) => x < aim).length
  if (min >= aim) return { outcome: 'met', text: `met (all ${n} rounds at or above ${aim}%)` }
  if (max < aim) return { outcome: 'not met', text: `not met (all ${n} rounds below ${aim}%)` }
  const spread = max - min
  if (spread > maxSpread)
    return {
      outcome: 'too wide',
      text: `spread too wide to judge (rounds spread over ${spread.toFixed(1)} points > ${maxSpread}, across ${aim}%: ${below} of ${n} below)`,
    }
  if (aim - min > straddle && max - aim > straddle)
    return {
      outcome: 'too wide',
      text: `spread too wide to judge (min..max straddles ${aim}% by more than ${straddle} points on both sides: ${below} of ${n} rounds below)`,
    }
  return median >= aim
    ? { outcome: 'met', text: `met by the median (${below} of ${n} rounds below ${aim}%)` }
    : { outcome: 'not met', text: `not met by the median (${n - below} of ${n} rounds at or above ${aim}%)` }
}

// ---- what else the machine did (from /proc) ----

interface CpuTimes {
  /** user + nice + system, all CPUs, clock ticks */
  busy: number
  steal: number
  total: number
}

function readCpuTimes(): CpuTimes {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = line.trim().split(/\s+/).slice(1).map(Number)
    return { busy: user + nice + system, steal, total: user + nice + system + idle + iowait + irq + softirq + steal }
  } catch {
    return { busy: Number.NaN, steal: Number.NaN, total: Number.NaN }
  }
}

interface Proc {
  ppid: number
  /** utime + stime, clock ticks */
  ticks: number
  name: string
}

function readProcesses(): Map<number, Proc> {
  const procs = new Map<number, Proc>()
  let entries: string[] = []
  try {
    entries = readdirSync('/proc')
  } catch {}
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const close = stat.lastIndexOf(')')
      const fields = stat.slice(close + 2).split(' ')
      procs.set(Number(entry), { ppid: Number(fields[1]), ticks: Number(fields[11]) + Number(fields[12]), name: stat.slice(stat.indexOf('(') + 1, close) })
    } catch {} // gone meanwhile
  }
  return procs
}

/** `node contracts.test.ts` or `node tsc` rather than `node` (the script it runs); else the process name */
function describe(pid: number, name: string): string {
  if (!/^(node|python3?|sh|bash|deno|bun)$/.test(name)) return name
  try {
    const script = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      .split('\0')
      .slice(1)
      .find((a) => a.includes('/') && !a.startsWith('-'))
    return script ? `${name} ${basename(script).slice(0, 40)}` : name
  } catch {
    return name
  }
}

/**
 * Starts watching the machine; `stop()` says what happened since outside this process and its
 * descendants, with the processes named in `services` counted apart.
 */
export function machineMeter(services: string[] = DEFAULT_SERVICES): { stop(): MachineLoad } {
  const started = performance.now()
  const cpuBefore = readCpuTimes()
  const procsBefore = readProcesses()
  return {
    stop() {
      const seconds = (performance.now() - started) / 1000
      const cpuAfter = readCpuTimes()
      const procsAfter = readProcesses()
      // the bench: this process and every descendant (servers, devnet, whatever they started)
      const bench = new Set([process.pid])
      for (let grown = true; grown; ) {
        grown = false
        for (const [pid, proc] of [...procsBefore, ...procsAfter])
          if (!bench.has(pid) && bench.has(proc.ppid)) {
            bench.add(pid)
            grown = true
          }
      }
      let benchTicks = 0
      let serviceTicks = 0
      const others = new Map<string, number>()
      for (const [pid, after] of procsAfter) {
        const used = after.ticks - (procsBefore.get(pid)?.ticks ?? 0)
        if (bench.has(pid)) benchTicks += used
        else if (services.includes(after.name)) serviceTicks += used
        else if (used > 0) {
          const name = describe(pid, after.name)
          others.set(name, (others.get(name) ?? 0) + used)
        }
      }
      const perCore = (ticks: number) => ticks / seconds // 100 ticks a second: ticks/s = % of one core
      const total = cpuAfter.total - cpuBefore.total
      return {
        seconds,
        stealPercent: total > 0 ? ((cpuAfter.steal - cpuBefore.steal) / total) * 100 : Number.NaN,
        othersPercent: Math.max(0, perCore(cpuAfter.busy - cpuBefore.busy - benchTicks - serviceTicks)),
        servicesPercent: perCore(serviceTicks),
        topOthers: [...others]
          .map(([name, ticks]) => ({ name, percent: perCore(ticks) }))
          .filter((o) => o.percent >= 2)
          .sort((a, b) => b.percent - a.percent)
          .slice(0, 3),
      }
    },
  }
}

// ---- one timed run with autocannon ----

export interface AutocannonRoundOptions {
  /** for error messages */
  name: string
  url: string
  seconds: number
  connections: number
  headers?: Record<string, string>
  /** autocannon request definitions (e.g. a setupRequest giving every request a header of its own) */
  requests?: autocannon.Request[]
  /** the server process whose CPU is divided by the requests answered (cpuMicrosPerRequest) */
  pid?: number
  /** handed a function that ends the round early */
  onStart?: (stop: () => void) => void
  /** headers for the one request sent to show what the target answers when a round saw non-2xx answers or errors */
  probeHeaders?: () => Record<string, string>
}

/** One timed autocannon round. Throws when any answer was not 2xx or any request failed. */
export async function autocannonRound(options: AutocannonRoundOptions): Promise<RoundResult> {
  const { url, seconds, connections, headers = {}, pid } = options
  const before = pid === undefined ? Number.NaN : cpuMicros(pid)
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon({ url, connections, duration: seconds, headers, ...(options.requests ? { requests: options.requests } : {}) }, (error, result) =>
      error ? reject(error) : resolve(result),
    )
    options.onStart?.(() => instance.stop())
  })
  const cpu = pid === undefined ? Number.NaN : cpuMicros(pid) - before
  if (result.non2xx > 0 || result.errors > 0) {
    const statuses = Object.entries(result.statusCodeStats ?? {}).map(([code, { count }]) => `${count} × ${code}`)
    const sample = await fetch(url, { headers: { ...headers, ...options.probeHeaders?.() } })
      .then(async (res) => `${res.status} ${(await res.text()).slice(0, 300)}`)
      .catch((error: Error) => error.message)
    throw new Error(
      `${options.name} (${url}): ${result.non2xx} non-2xx answers (${statuses.join(', ')}), ${result.errors} errors; one more request now: ${sample}`,
    )
  }
  return {
    rps: result.requests.average,
    p99: result.latency.p99,
    requests: result.requests.total,
    ...(pid === undefined ? {} : { cpuMicrosPerRequest: cpu / result.requests.total }),
  }
}

// ---- running the rounds ----

const fixed = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '—')

function machineText(machine: MachineLoad): string {
  const top = machine.topOthers.length > 0 ? ` (${machine.topOthers.map((o) => `${o.name} ${o.percent.toFixed(0)}%`).join(', ')})` : ''
  return `steal ${fixed(machine.stealPercent)}%, services ${fixed(machine.servicesPercent, 0)}%, others ${fixed(machine.othersPercent, 0)}% of a core${top}`
}

function measurementLine(m: Measurement, rounds: number, width: number): string {
  const { rps, p99, cpuMicrosPerRequest, extra } = m.result
  const round = m.round === 0 ? 'warm-up' : `${m.round}/${rounds}`
  const parts = [`${round.padEnd(7)} ${m.target.padEnd(width)} ${fixed(rps, 0).padStart(6)} req/s  p99 ${fixed(p99).padStart(6)} ms`]
  if (cpuMicrosPerRequest !== undefined) parts.push(`${fixed(cpuMicrosPerRequest).padStart(6)} µs CPU/req`)
  for (const [name, value] of Object.entries(extra ?? {})) parts.push(`${name} ${fixed(value)}`)
  parts.push(`${m.disturbed ? 'DISTURBED: ' : ''}${machineText(m.machine)}`)
  return parts.join('  ')
}

function ratioValue(ratio: Ratio, numerator: RoundResult, base: RoundResult[]): number {
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
  if (ratio.metric === 'cpu') return (mean(base.map((r) => r.cpuMicrosPerRequest ?? Number.NaN)) / (numerator.cpuMicrosPerRequest ?? Number.NaN)) * 100
  return (numerator.rps / mean(base.map((r) => r.rps))) * 100
}

/** The ratio's value per round, and its summary and verdict over the undisturbed rounds (or all, when too few are). */
function ratioReport(ratio: Ratio, measurements: Measurement[], options: HarnessOptions): RatioReport {
  const base = measurements.filter((m) => m.target === ratio.denominator)
  const perRound = new Map<number, number>()
  const sources = new Map<number, Measurement[]>()
  const disturbed = new Set<number>()
  for (const m of measurements.filter((m) => m.target === ratio.numerator)) {
    // the denominator's runs adjacent in time: the nearest before and the nearest after
    const before = base.filter((b) => b.seq < m.seq).at(-1)
    const after = base.find((b) => b.seq > m.seq)
    const adjacent = [before, after].filter((b): b is Measurement => b !== undefined)
    if (adjacent.length === 0) continue
    perRound.set(
      m.round,
      ratioValue(
        ratio,
        m.result,
        adjacent.map((b) => b.result),
      ),
    )
    sources.set(m.round, [m, ...adjacent])
    if ([m, ...adjacent].some((x) => x.disturbed)) disturbed.add(m.round)
  }
  const all = [...perRound.values()]
  const undisturbed = [...perRound].filter(([round]) => !disturbed.has(round)).map(([, value]) => value)
  const over = undisturbed.length >= Math.max(3, Math.ceil(perRound.size / 2)) ? 'undisturbed' : 'all'
  const values = over === 'undisturbed' ? undisturbed : all
  return {
    ratio,
    perRound,
    sources,
    disturbed,
    over,
    summary: summarize(values),
    ...(ratio.aim === undefined ? {} : { verdict: judge(values, ratio.aim, options) }),
  }
}

/** Runs the warm-up round and `rounds` counted rounds of every target, interleaved; prints a line per run. */
export async function runInterleaved(options: HarnessOptions): Promise<Report> {
  const { targets, ratios, rounds, seconds, order = 'fixed', disturbedAt = DEFAULT_DISTURBED_AT, log = console.log } = options
  const names = new Set(targets.map((t) => t.name))
  for (const r of ratios)
    for (const name of [r.numerator, r.denominator]) if (!names.has(name)) throw new Error(`ratio ${r.name}: no target named ${name}`)
  const width = Math.max(...targets.map((t) => t.name.length))
  const measurements: Measurement[] = []
  const started = performance.now()
  let seq = 0
  for (let round = 0; round <= rounds; round++) {
    const shift = order === 'rotate' ? round % targets.length : 0
    for (const target of [...targets.slice(shift), ...targets.slice(0, shift)]) {
      const meter = machineMeter(options.services)
      const result = await target.run({ round, warmUp: round === 0, seconds })
      const machine = meter.stop()
      const disturbed = machine.othersPercent >= disturbedAt || machine.stealPercent >= DISTURBING_STEAL
      const m: Measurement = { target: target.name, round, seq: seq++, result, machine, disturbed }
      if (round > 0) measurements.push(m)
      log(measurementLine(m, rounds, width))
    }
  }
  return {
    options,
    measurements,
    ratios: ratios.map((r) => ratioReport(r, measurements, options)),
    seconds: (performance.now() - started) / 1000,
  }
}

// ---- the summary ----

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length)))
  return rows.map((row) => row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ').trimEnd()).join('\n')
}

const range = (s: Summary, digits = 1) => `${fixed(s.min, digits)}..${fixed(s.max, digits)}`

/**
 * Prints the ratio of every round, the targets' medians, each ratio's median with min..max and the
 * verdict on its aim, what the machine did besides, and for every ratio whose rounds spread too
 * wide why its median may not repeat.
 */
export function printReport(report: Report, log: (line: string) => void = console.log): void {
  const { options, measurements } = report
  const { rounds, targets, maxSpread = DEFAULT_MAX_SPREAD, disturbedAt = DEFAULT_DISTURBED_AT } = options
  const roundNumbers = Array.from({ length: rounds }, (_, i) => i + 1)

  log('')
  log(`ratio per round, % (each against the mean of the denominator's runs just before and after it; * = disturbed):`)
  log(
    table([
      ['ratio', ...roundNumbers.map(String)],
      ...report.ratios.map((r) => [r.ratio.name, ...roundNumbers.map((n) => `${fixed(r.perRound.get(n) ?? Number.NaN)}${r.disturbed.has(n) ? '*' : ' '}`)]),
    ]),
  )

  log('')
  log(`targets, median (min..max) over all ${rounds} rounds of ${options.seconds} s:`)
  const extras = [...new Set(measurements.flatMap((m) => Object.keys(m.result.extra ?? {})))]
  const hasCpu = measurements.some((m) => m.result.cpuMicrosPerRequest !== undefined)
  const cell = (values: number[], digits: number) => {
    const s = summarize(values)
    return s.n === 0 ? '—' : `${fixed(s.median, digits)} (${range(s, digits)})`
  }
  log(
    table([
      ['target', 'req/s', 'p99 ms', ...(hasCpu ? ['CPU µs/req'] : []), ...extras],
      ...targets.map((t) => {
        const runs = measurements.filter((m) => m.target === t.name).map((m) => m.result)
        const column = (pick: (r: RoundResult) => number | undefined, digits = 1) => cell(runs.map((r) => pick(r) ?? Number.NaN), digits)
        return [
          t.label ? `${t.name}: ${t.label}` : t.name,
          column((r) => r.rps, 0),
          column((r) => r.p99),
          ...(hasCpu ? [column((r) => r.cpuMicrosPerRequest)] : []),
          ...extras.map((name) => column((r) => r.extra?.[name])),
        ]
      }),
    ]),
  )

  log('')
  log(`ratios, median and min..max over the undisturbed rounds where at least half (and 3) are, else over all ${rounds}:`)
  log(
    table([
      ['ratio', 'median', 'min..max', 'spread', 'rounds', 'aim', 'verdict'],
      ...report.ratios.map(({ ratio, summary, verdict, over }) => [
        ratio.name,
        `${fixed(summary.median)}%`,
        `${range(summary)}%`,
        fixed(summary.max - summary.min),
        `${summary.n}${over === 'undisturbed' ? ' undisturbed' : ' (all)'}`,
        ratio.aim === undefined ? '—' : `≥ ${ratio.aim}%`,
        verdict?.text ?? '(no aim)',
      ]),
    ]),
  )

  // what the machine did besides the bench
  const steal = summarize(measurements.map((m) => m.machine.stealPercent))
  const others = summarize(measurements.map((m) => m.machine.othersPercent))
  const disturbed = measurements.filter((m) => m.disturbed)
  const heaviest = new Map<string, number>() // name → CPU seconds over all runs
  for (const m of measurements) for (const o of m.machine.topOthers) heaviest.set(o.name, (heaviest.get(o.name) ?? 0) + (o.percent / 100) * m.machine.seconds)
  const runSeconds = measurements.reduce((sum, m) => sum + m.machine.seconds, 0)
  const heaviestText = [...heaviest]
    .map(([name, cpuSeconds]) => [name, (cpuSeconds / runSeconds) * 100] as const)
    .filter(([, percent]) => percent >= 2)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([name, percent]) => `${name} ${percent.toFixed(0)}%`)
    .join(', ')
  log('')
  log(
    `machine during the ${measurements.length} counted runs (${fixed(report.seconds, 0)} s of rounds): steal median ${fixed(steal.median)}% (max ${fixed(steal.max)}%); ` +
      `processes outside the bench, not Redis/NATS/Postgres: median ${fixed(others.median, 0)}% of a core (max ${fixed(others.max, 0)}%)` +
      (heaviestText ? `, mostly ${heaviestText} of a core on average` : ''),
  )
  log(
    disturbed.length === 0
      ? `no run was disturbed (outside load ≥ ${disturbedAt}% of a core or steal ≥ ${DISTURBING_STEAL}%)`
      : disturbed.length === measurements.length
        ? `all ${measurements.length} runs disturbed (outside load ≥ ${disturbedAt}% of a core or steal ≥ ${DISTURBING_STEAL}%)`
        : `${disturbed.length} of ${measurements.length} runs disturbed (outside load ≥ ${disturbedAt}% of a core or steal ≥ ${DISTURBING_STEAL}%): ` +
          roundNumbers
            .map((n) => [n, disturbed.filter((m) => m.round === n).map((m) => m.target)] as const)
            .filter(([, names]) => names.length > 0)
            .map(([n, names]) => `round ${n} (${names.join(', ')})`)
            .join('; '),
  )

  // whether each median can be expected to repeat, and if not, why
  const minUndisturbed = Math.max(3, Math.ceil(rounds / 2))
  const overAll = report.ratios.filter((r) => r.over === 'all' && r.disturbed.size > 0)
  if (overAll.length > 0)
    log(
      `NOTE ${overAll.length === report.ratios.length ? 'every ratio' : overAll.map((r) => `"${r.ratio.name}"`).join(', ')}: ` +
        `fewer than ${minUndisturbed} of ${rounds} rounds were undisturbed, so the medians ` +
        `include rounds in which other processes${heaviestText ? ` (mostly ${heaviestText.replace(/ \d+%/g, '')})` : ''} took CPU from the bench, and may not repeat`,
    )
  for (const { ratio, perRound, sources, summary, over, disturbed: disturbedRounds } of report.ratios) {
    const spread = summary.max - summary.min
    if (!(spread > maxSpread)) continue
    const roundOf = (value: number) => [...perRound].find(([round, v]) => v === value && (over === 'all' || !disturbedRounds.has(round)))?.[0]
    const [low, high] = [roundOf(summary.min), roundOf(summary.max)]
    const hit = [low, high].filter((r): r is number => r !== undefined && (sources.get(r) ?? []).some((m) => m.disturbed))
    log(
      `NOTE ${ratio.name}: the rounds spread over ${spread.toFixed(1)} points (> ${maxSpread}; lowest in round ${low}, highest in round ${high}), ` +
        `so its median may move by more than ${maxSpread / 2} points in a repeat run: ` +
        (hit.length > 0
          ? `outside load hit round ${hit.join(' and ')}`
          : 'no outside load was seen in those rounds, so the variation is in the measured processes themselves (GC, JIT, Redis/NATS/Postgres) or in the host'),
    )
  }
}
