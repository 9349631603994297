// What every runner (the LLM loop, the offline planner) is given and gives back.
import type { Toolbox } from './toolbox.ts'
import type { JobOwner } from './tools.ts'
import { countUsage, type Usage } from './usage.ts'

export interface RunInput {
  jobId: string
  prompt: string
  /** the thread's earlier messages, oldest first */
  history: Array<{ role: 'user' | 'assistant'; content: string }>
  context?: unknown
  /** the caller's instructions (/v1 system and developer messages), for a language model */
  instructions?: string | undefined
  owner: JobOwner
  /** the answer's text as the model produces it: joined, exactly the text the run returns (the planner never calls it) */
  onText?: ((text: string) => void) | undefined
  /** the tokens of the run so far, after each model turn (a runner without a model reports them only at the end) */
  onUsage?: ((usage: Usage) => void) | undefined
  /** work paid by a credit hold: how far a model turn may go so that the run stays within the hold */
  budget?: RunBudget | undefined
}

export interface RunBudget {
  /**
   * The most output tokens the next model turn may produce, given its input tokens: undefined
   * for no limit, 0 when the hold does not cover the turn at all.
   */
  outputTokens(turnInputTokens: number): number | undefined
}

export interface Runner {
  name: string
  /** the answer, how many answers the model (or planner) composed, and the tokens it took */
  run(input: RunInput, toolbox: Toolbox, signal: AbortSignal): Promise<{ text: string; modelTurns: number; usage: Usage }>
}

/** The tokens of a run counted over its conversation and answer (a runner without a model's own count). */
export const countRunUsage = (input: RunInput, text: string): Promise<Usage> =>
  countUsage(
    [
      ...(input.instructions ? [{ role: 'system' as const, content: input.instructions }] : []),
      ...input.history,
      { role: 'user' as const, content: input.prompt },
    ],
    text,
  )

/** A job cannot be finished for a reason the client should read (the model failed, the step limit). */
export class RunnerError extends Error {
  override name = 'RunnerError'
}
