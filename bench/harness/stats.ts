// The statistics of the rounds: a median with its min..max, the verdict on an aim, and how a figure prints.

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

export const DEFAULT_MAX_SPREAD = 10
const DEFAULT_STRADDLE = 3

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
export function judge(
  values: number[],
  aim: number,
  { maxSpread = DEFAULT_MAX_SPREAD, straddle = DEFAULT_STRADDLE }: JudgeOptions = {},
): Verdict {
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

export const fixed = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '—')
