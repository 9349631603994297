// Running the targets round after round, interleaved, and making each ratio from adjacent runs.

import { type MachineLoad, machineMeter } from './machine.ts'
import { fixed, type JudgeOptions, judge, type Summary, summarize, type Verdict } from './stats.ts'

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

export interface Measurement {
  target: string
  round: number
  /** position in time over the whole run */
  seq: number
  result: RoundResult
  machine: MachineLoad
  disturbed: boolean
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

export const DEFAULT_DISTURBED_AT = 20
/** steal that disturbs a run, % */
export const DISTURBING_STEAL = 5

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
  if (ratio.metric === 'cpu')
    return (mean(base.map((r) => r.cpuMicrosPerRequest ?? Number.NaN)) / (numerator.cpuMicrosPerRequest ?? Number.NaN)) * 100
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
