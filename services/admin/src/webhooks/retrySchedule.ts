// When a failed webhook delivery is tried again: WEBHOOK_RETRY_SCHEDULE, each delay with jitter.

const units = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const

/** The setting's form: durations like 100ms, 5s, 5m, 2h, comma-separated. */
export const retrySchedulePattern = '^\\s*[0-9]+(ms|s|m|h)\\s*(,\\s*[0-9]+(ms|s|m|h)\\s*)*$'

/** `5s` -> 5000; throws on anything else. */
export function parseDuration(text: string): number {
  const match = /^([0-9]+)(ms|s|m|h)$/.exec(text.trim())
  if (!match) throw new Error(`"${text}" is not a duration like 100ms, 5s, 5m or 2h`)
  return Number(match[1]) * units[match[2] as keyof typeof units]
}

/** The delays between tries, in ms: the first is waited after the first failure. */
export function parseRetrySchedule(text: string): number[] {
  const delays = text.split(',').map(parseDuration)
  if (delays.some((d) => d <= 0)) throw new Error('every delay of the retry schedule must be more than 0')
  return delays
}

/**
 * The delay before try `attempts + 1` after `attempts` failed ones, ±20% so that the deliveries
 * of one outage do not all come back at the same moment; undefined past the schedule (give up).
 */
export function nextDelayMs(schedule: number[], attempts: number, random = Math.random): number | undefined {
  const base = schedule[attempts - 1]
  if (base === undefined) return undefined
  return Math.round(base * (0.8 + 0.4 * random()))
}
