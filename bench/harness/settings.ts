// The benches' settings from the environment.

/** A whole number above zero from the environment, else `fallback`; anything else stops the bench, naming the setting. */
export function positiveSetting(name: string, fallback: number): number {
  const raw = process.env[name]
  const value = Number(raw ?? fallback)
  if (!(Number.isInteger(value) && value > 0)) throw new Error(`${name} must be a positive whole number, not ${raw}`)
  return value
}
