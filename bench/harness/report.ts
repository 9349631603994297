// The summary printed after the rounds: ratios per round, medians, verdicts and what else loaded the machine.

import { DEFAULT_DISTURBED_AT, DISTURBING_STEAL, type Report, type RoundResult } from './rounds.ts'
import { DEFAULT_MAX_SPREAD, fixed, type Summary, summarize } from './stats.ts'

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length)))
  return rows
    .map((row) =>
      row
        .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')
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
      ...report.ratios.map((r) => [
        r.ratio.name,
        ...roundNumbers.map((n) => `${fixed(r.perRound.get(n) ?? Number.NaN)}${r.disturbed.has(n) ? '*' : ' '}`),
      ]),
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
        const column = (pick: (r: RoundResult) => number | undefined, digits = 1) =>
          cell(
            runs.map((r) => pick(r) ?? Number.NaN),
            digits,
          )
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
  for (const m of measurements)
    for (const o of m.machine.topOthers) heaviest.set(o.name, (heaviest.get(o.name) ?? 0) + (o.percent / 100) * m.machine.seconds)
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
    const roundOf = (value: number) =>
      [...perRound].find(([round, v]) => v === value && (over === 'all' || !disturbedRounds.has(round)))?.[0]
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
