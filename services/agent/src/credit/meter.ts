// Counts the work of one run paid by a credit hold as it goes, so that the run can be kept within
// the hold (the model's output tokens are capped per turn) and charged what it did: all of it when
// it completes, what it did until then when it is cancelled while running.
import type { CreditUsageDetail } from '@ats/contracts'
import type { RunBudget } from '../runner/runner.ts'
import { countText, type Usage } from '../runner/usage.ts'
import { costOf, outputTokensWithin, type Prices, type Work } from './prices.ts'
import type { CreditCharge } from '../jobs/store.ts'

export function createCreditMeter(prices: Prices, model: string, hold: bigint) {
  let usage: Usage = { promptTokens: 0, completionTokens: 0 }
  let turns = 0
  /** the text of the turn in progress, streamed since the model last reported its tokens */
  let streamed = ''
  let toolCalls = () => 0
  const work = (): Work => ({ model, inputTokens: usage.promptTokens, outputTokens: usage.completionTokens, toolCalls: toolCalls() })

  /** The charge of `work`: its cost, at most the hold. */
  const chargeOf = (done: Work, steps: number): CreditCharge => {
    const cost = costOf(prices, done)
    const detail: CreditUsageDetail = { model, inputTokens: done.inputTokens, outputTokens: done.outputTokens, steps }
    return { amount: cost < hold ? cost : hold, usage: detail }
  }

  return {
    /** the run's tool calls, as its toolbox counts them */
    countToolCalls(count: () => number) {
      toolCalls = count
    },
    onText(text: string) {
      streamed += text
    },
    onUsage(total: Usage) {
      usage = total
      turns += 1
      streamed = ''
    },
    budget: { outputTokens: (turnInputTokens) => outputTokensWithin(prices, hold, work(), turnInputTokens) } satisfies RunBudget,
    /** A completed run: its tokens as the runner reports them, its tool calls, its steps (turns and tool calls). */
    completed: (total: Usage | undefined, steps: number): CreditCharge =>
      chargeOf({ ...work(), inputTokens: total?.promptTokens ?? 0, outputTokens: total?.completionTokens ?? 0 }, steps),
    /**
     * A run cancelled while it ran: the turns the model finished, the output it had streamed of the
     * turn in progress (counted with the tokenizer; that turn's input is not counted), its tool calls.
     */
    async cancelled(): Promise<CreditCharge> {
      const partial = streamed === '' ? 0 : await countText(streamed)
      const done = { ...work(), outputTokens: usage.completionTokens + partial }
      return chargeOf(done, turns + (partial > 0 ? 1 : 0) + done.toolCalls)
    },
  }
}
export type CreditMeter = ReturnType<typeof createCreditMeter>
