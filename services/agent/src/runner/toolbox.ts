// Runs a job's tool calls: numbers them, records each in job_steps with start/finish events,
// and reuses what an earlier run of the same job already finished (a worker that died).
import type { JobEvent, JobTransaction } from '@ats/contracts'
import { fingerprintOf, type Logger } from '@ats/service-kit'
import type { JobStore } from '../jobs/store.ts'
import { noApprovalWaits, type ApprovalWaits } from './approvals.ts'
import { ToolError, checkArguments, type JobOwner, type ToolOutput, type Tools } from './tools.ts'

/** `serviceFault`: the tool failed through a fault of the fleet (a service failing or down), not the asker's */
export type ToolCallOutcome = { ok: true; output: unknown } | { ok: false; error: string; serviceFault?: boolean }

/**
 * What a step is: its tool and its arguments (canonical JSON, so key order does not matter).
 * A run that takes a job over reuses an earlier step only when this matches, and the step's
 * idempotency key carries it, so that a re-run which plans differently (a language model need
 * not plan the same twice) makes step n a new action with a new key rather than receiving the
 * result of the earlier run's step n (or a 409 for the other parameters).
 */
export const stepContent = (tool: string, input: unknown) => fingerprintOf({ tool, input }).slice(0, 32)

/** The idempotency key of what step `n` sends (a swap): the job, the step number and its content. */
export const stepKey = (jobId: string, n: number, tool: string, input: unknown) => `job:${jobId}:step:${n}:${stepContent(tool, input)}`

export interface ToolboxOptions {
  tools: Tools
  store: JobStore
  emit(event: JobEvent): void
  log: Logger
  jobId: string
  owner: JobOwner
  signal: AbortSignal
  /** what the job does while a swap waits for approval (the worker's); by default nothing */
  approvals?: ApprovalWaits
  /** the job's first run: no earlier run left steps to reuse, so none are read */
  firstRun?: boolean
}

export async function createToolbox({
  tools,
  store,
  emit,
  log,
  jobId,
  owner,
  signal,
  approvals = noApprovalWaits,
  firstRun = false,
}: ToolboxOptions) {
  const earlier = new Map(firstRun ? [] : (await store.stepsOf(jobId)).map((s) => [s.step, s]))
  let step = 0
  const toolCalls: string[] = []
  const transactions: JobTransaction[] = []

  async function call(name: string, args: unknown): Promise<ToolCallOutcome> {
    signal.throwIfAborted()
    step += 1
    const n = step
    toolCalls.push(name)
    const tool = tools.byName.get(name)
    const input = args ?? {}
    const before = earlier.get(n)
    const content = stepContent(name, input)
    if (before?.finishedAt && stepContent(before.tool, before.input) === content) {
      log.info({ jobId, step: n, tool: name }, 'step finished by an earlier run; reusing its outcome')
      if (before.error !== null) return { ok: false, error: before.error }
      const done = before.output as unknown as ToolOutput
      transactions.push(...(done.transactions ?? []))
      return { ok: true, output: done.output }
    }
    emit(await store.startStep(jobId, n, name, input))
    try {
      if (!tool) throw new ToolError(`there is no tool named ${name}; tools: ${tools.all.map((t) => t.name).join(', ')}`)
      checkArguments(tool, input)
      const done = await tool.run(input as never, { jobId, step: n, key: stepKey(jobId, n, name, input), owner, signal, approvals })
      emit(await store.finishStep(jobId, n, name, { output: done }))
      transactions.push(...(done.transactions ?? []))
      return { ok: true, output: done.output }
    } catch (error) {
      if (signal.aborted) throw error
      if (!(error instanceof ToolError)) {
        log.error({ err: error, jobId, step: n, tool: name }, 'tool failed')
        throw error
      }
      emit(await store.finishStep(jobId, n, name, { error: error.message }))
      return { ok: false, error: error.message, ...(error.serviceFault ? { serviceFault: true } : {}) }
    }
  }

  return { call, toolCalls, transactions, definitions: tools.all }
}
export type Toolbox = Awaited<ReturnType<typeof createToolbox>>
