// The job behind a /v1 answer: a conversation becomes an agent job of the API key, followed
// until it ends; each API only writes the answer in its own shape. A followed job's text arrives
// through `onText`: the model's tokens as they are produced (job `delta` events), then whatever of
// the final text was not streamed; joined, the pieces are always the job's result text.
import { chargedHeader, type AgentToolCall, type AgentTrace, type JobResult } from '@ats/contracts'
import type { FastifyReply } from 'fastify'
import { Unavailable } from '@ats/service-kit'
import { Timeout } from '../errors.ts'
import { creditHoldOf } from '../credit/hold.ts'
import type { JobEvents } from '../jobs/events.ts'
import type { JobQueue } from '../jobs/queue.ts'
import type { JobStore, Owner, PromptInput } from '../jobs/store.ts'
import type { ToolOutput } from '../runner/tools.ts'
import { endOf, piecesOf, type StepView, type Terminal, type Waiting } from './progress.ts'

export interface AnswerDeps {
  store: JobStore
  queue: JobQueue
  events: JobEvents
  /** broadcast that a job was cancelled, for the worker running it; withdraws the approval it waited for */
  cancelled(jobId: string, owner: Owner, approvalId?: string): void
  /** how long a waiting answer waits for its job before it is cancelled (504) */
  waitMs: number
}

export function createAnswers({ store, queue, events, cancelled, waitMs }: AnswerDeps) {
  async function cancel(owner: Owner, jobId: string) {
    const ended = await store.cancel(owner, jobId)
    if (!ended) return false
    events.emit(ended.event)
    cancelled(jobId, owner, ended.approvalId)
    return true
  }

  /**
   * Creates and queues the job (a /v1 answer's, or POST /agent/prompt's), with the request's credit
   * hold; `stream` takes one of the owner's stream slots first (429 when none is left).
   */
  async function start(reply: FastifyReply, owner: Owner, input: Omit<PromptInput, 'credit'>, stream: boolean) {
    if (stream) events.takeStreamSlot(owner.ownerId, reply.raw)
    const credit = creditHoldOf(reply.request)
    const created = await store.createPrompt(owner, { ...input, credit })
    // the job's end reports what it keeps of the hold
    reply.request.creditHoldTaken = credit !== undefined
    events.emit(created.event)
    await queue.enqueue(created.jobId)
    return { jobId: created.jobId, threadId: created.threadId, at: created.event.at, seq: created.event.seq }
  }

  /**
   * Follows the job until it ends, starts waiting for a person's approval (the answer says so
   * at once; the job goes on), the client leaves (the job is cancelled), the wait runs out
   * (cancelled, 504) or the service stops (cancelled, 503). A complete job's text has gone
   * through `onText` in full before this returns.
   */
  async function follow(
    reply: FastifyReply,
    owner: Owner,
    jobId: string,
    afterSeq: number,
    handlers: { onStep?(step: StepView): void; onText?(delta: string): void } = {},
  ): Promise<Terminal | Waiting | 'left'> {
    let end: Terminal | Waiting | undefined
    /** the text that went through `onText` so far */
    let delivered = ''
    const following = events.watch(jobId, afterSeq, false, (e) => {
      if (e.type === 'delta') {
        if (!handlers.onText) return
        delivered += e.data.text
        handlers.onText(e.data.text)
        return
      }
      if (e.type === 'step') handlers.onStep?.(e.data as StepView)
      end ??= endOf(e)
      if (end?.status === 'awaiting_approval') following.stop()
    })
    let left = false
    const leave = () => {
      if (reply.raw.writableEnded) return
      left = true
      following.stop()
    }
    reply.raw.on('close', leave)
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      following.stop()
    }, waitMs)
    await following.ended
    clearTimeout(timer)
    reply.raw.off('close', leave)
    if (end) {
      if (end.status === 'complete' && handlers.onText) {
        const { text } = end.result
        // a run taken over by another worker may have written other text than what was streamed
        if (!text.startsWith(delivered))
          reply.request.log.warn({ jobId, delivered: delivered.length }, 'the streamed text is not the start of the answer')
        for (const piece of piecesOf(text.slice(delivered.length))) handlers.onText(piece)
      }
      return end
    }
    await cancel(owner, jobId)
    if (left) {
      reply.request.log.info({ jobId }, 'client left: job cancelled')
      return 'left'
    }
    throw timedOut
      ? new Timeout(Math.round(waitMs / 1000))
      : new Unavailable('the agent service is restarting; the job was cancelled, send the request again')
  }

  /** The ATS-Charged header of a non-streamed answer paid by credit: what it cost, USDC base units. */
  function charged(reply: FastifyReply, result: JobResult) {
    if (result.charged !== undefined) reply.header(chargedHeader, result.charged)
  }

  /** The agent's own tool calls of a finished job, for the answer's `agent` field. */
  async function traceOf(jobId: string, threadId: string, result: JobResult): Promise<AgentTrace> {
    const steps = (await store.stepsOf(jobId)).filter((s) => s.step <= result.toolCalls.length)
    const toolCalls = steps.map(
      (s): AgentToolCall => ({
        id: `call_${jobId}_${s.step}`,
        type: 'function',
        function: { name: s.tool, arguments: JSON.stringify(s.input ?? {}) },
        ...(s.error === null
          ? { status: 'ok', output: (s.output as unknown as ToolOutput | null)?.output }
          : { status: 'error', error: s.error }),
      }),
    )
    return { jobId, threadId, steps: result.steps, tool_calls: toolCalls, transactions: result.transactions }
  }

  /** The agent's tool calls so far of a job that waits for approval. */
  async function traceSoFar(jobId: string, threadId: string): Promise<AgentTrace> {
    const steps = await store.stepsOf(jobId)
    return traceOf(jobId, threadId, { text: '', steps: steps.length, toolCalls: steps.map((s) => s.tool), transactions: [] })
  }

  /** A finished job's tokens, and what it cost when credit paid it (its `ats_charged`). */
  const usageOf = (result: JobResult) => {
    const { promptTokens = 0, completionTokens = 0 } = result.usage ?? {}
    return { input: promptTokens, output: completionTokens, charged: result.charged }
  }

  return {
    start,
    follow,
    charged,
    cancel,
    traceOf,
    traceSoFar,
    usageOf,
    openStream: events.openStream,
    store,
  }
}
export type Answers = ReturnType<typeof createAnswers>
