// A followed job as the /v1 answers show it: its text in word-sized pieces, a tool step, a wait
// for a person's approval, and how it ended.
import type { Approval, JobAwaitingApproval, JobEvent, JobResult } from '@ats/contracts'
import { JobFailed } from '../errors.ts'

/** The answer's text in pieces, each a word with the space after it: joined, they are the text. */
export const piecesOf = (text: string): string[] => text.match(/\S+\s*|\s+/g) ?? []

export type Terminal = { status: 'complete'; result: JobResult } | { status: 'failed'; error: string } | { status: 'cancelled' }

/** A job that waits for a person to approve a swap: a /v1 answer says so at once, and where to decide. */
export type Waiting = { status: 'awaiting_approval'; approval: Approval; notice: string }

/** What an event ends a /v1 answer's wait with: the job's end, or its wait for an approval; undefined for any other. */
export const endOf = (e: JobEvent): Terminal | Waiting | undefined => {
  if (e.type !== 'status') return undefined
  const data = e.data as { status: string; result?: JobResult; error?: string; approval?: Approval; notice?: string }
  if (data.status === 'complete') return { status: 'complete', result: data.result! }
  if (data.status === 'failed') return { status: 'failed', error: data.error ?? 'the job failed' }
  if (data.status === 'cancelled') return { status: 'cancelled' }
  if (data.status !== 'awaiting_approval' || !data.approval) return undefined
  const notice = data.notice ?? `Approval needed: POST ${data.approval.links.approve} or ${data.approval.links.reject}.`
  return { status: 'awaiting_approval', approval: data.approval, notice }
}

/** A waiting job's answer text: what waits, where to decide it, and where the job's answer will be (`followUp`). */
export const waitingText = (w: Waiting, followUp: string) => `${w.notice} This answer's job goes on after the decision: ${followUp}`

/** The `ats` field of a waiting job's answer. */
export const waitingField = (jobId: string, w: Waiting): JobAwaitingApproval => ({ jobId, ...w })

/** Why a job gave no answer, as the error the client gets. */
export const failureOf = (end: Exclude<Terminal, { status: 'complete' }>) =>
  new JobFailed(end.status === 'failed' ? `the agent could not answer: ${end.error}` : 'the job was cancelled before it answered')

/** One tool step of a running job, as its `step` event says. */
export type StepView = Extract<JobEvent['data'], { step: number }>

/** A step as the /v1 streams show it (`agent.step`): its input as JSON text, as tool-call arguments are. */
export const streamedStep = (jobId: string, step: StepView) => ({
  jobId,
  step: {
    step: step.step,
    tool: step.tool,
    phase: step.phase,
    ...(step.input === undefined ? {} : { arguments: JSON.stringify(step.input) }),
    ...(step.error === undefined ? {} : { error: step.error }),
  },
})
