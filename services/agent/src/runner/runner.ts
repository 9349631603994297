// What every runner (the LLM loop, the offline planner) is given and gives back.
import type { Toolbox } from './toolbox.ts'
import type { JobOwner } from './tools.ts'

export interface RunInput {
  jobId: string
  prompt: string
  /** the thread's earlier messages, oldest first */
  history: Array<{ role: 'user' | 'assistant'; content: string }>
  context?: unknown
  owner: JobOwner
}

export interface Runner {
  name: string
  /** the answer and how many answers the model (or planner) composed */
  run(input: RunInput, toolbox: Toolbox, signal: AbortSignal): Promise<{ text: string; modelTurns: number }>
}

/** A job cannot be finished for a reason the client should read (the model failed, the step limit). */
export class RunnerError extends Error {
  override name = 'RunnerError'
}
