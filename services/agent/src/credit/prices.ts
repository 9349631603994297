// What metered work paid by credit costs: tokens in and out at a price per model, plus a price
// per tool call, in USDC base units. Prices are per million tokens, the unit model providers
// quote in: USDC has 6 decimals, so "3000000" is $3 per 1M tokens, and no price needs a fraction.
// A request's cost is rounded up once, to a whole base unit.
import { Type } from 'typebox'
import { Compile } from 'typebox/compile'

/** Input and output prices of one model, USDC base units per 1M tokens. */
export interface ModelPrice {
  input: bigint
  output: bigint
}

export interface Prices {
  /** the price of `model`: its own, else the default */
  of(model: string): ModelPrice
  toolCall: bigint
}

/** What metered work used: the model that ran, its tokens, and the tool calls it made. */
export interface Work {
  model: string
  inputTokens: number
  outputTokens: number
  toolCalls: number
}

const perMillion = 1_000_000n
const price = Type.Integer({ minimum: 0, maximum: 1e15 })
const modelPrices = Compile(Type.Record(Type.String({ minLength: 1, maxLength: 200 }), Type.Object({ input: price, output: price })))

/** What is wrong with an AGENT_CREDIT_MODEL_PRICES value, or undefined when it is fine. */
export function modelPricesProblem(raw: string): string | undefined {
  const expected = 'must be a JSON object of model: {"input", "output"} (USDC base units per 1M tokens, whole numbers)'
  let value: unknown
  try {
    value = JSON.parse(raw)
  } catch {
    return `${expected}: not JSON`
  }
  if (modelPrices.Check(value)) return undefined
  const [first] = modelPrices.Errors(value)
  return `${expected}: ${first ? `${first.instancePath || 'the value'} ${first.message}` : 'not valid'}`
}

export function createPrices(settings: { modelPrices: string; input: number; output: number; toolCall: number }): Prices {
  const price = (p: { input: number; output: number }): ModelPrice => ({ input: BigInt(p.input), output: BigInt(p.output) })
  const listed = Object.entries(JSON.parse(settings.modelPrices) as Record<string, { input: number; output: number }>)
  const prices = new Map(listed.map(([model, p]) => [model, price(p)]))
  const fallback = price(settings)
  return { of: (model) => prices.get(model) ?? fallback, toolCall: BigInt(settings.toolCall) }
}

/** What `work` costs, USDC base units: its tokens at its model's prices (rounded up once) and its tool calls. */
export function costOf(prices: Prices, work: Work): bigint {
  const { input, output } = prices.of(work.model)
  const tokens = BigInt(work.inputTokens) * input + BigInt(work.outputTokens) * output
  return (tokens + perMillion - 1n) / perMillion + BigInt(work.toolCalls) * prices.toolCall
}

/**
 * The most output tokens a model turn may produce so that the work stays within `hold`: what is
 * left of the hold after the work so far and this turn's input tokens, at `model`'s output price.
 * Undefined: no limit (output is free). 0: not even one token fits.
 */
export function outputTokensWithin(prices: Prices, hold: bigint, soFar: Work, turnInputTokens: number): number | undefined {
  const { output } = prices.of(soFar.model)
  if (output === 0n) return undefined
  const spent = costOf(prices, { ...soFar, inputTokens: soFar.inputTokens + turnInputTokens })
  if (spent >= hold) return 0
  const tokens = ((hold - spent) * perMillion) / output
  return tokens > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(tokens)
}
