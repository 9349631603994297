import { Type, type Static } from 'typebox'
import { topic } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { EpochMs } from '../common/primitives.ts'
import { Approval } from '../trading/approvals.ts'
import { JobResult, JobStatusSchema } from './http.ts'

/** A job to run: the work queue holds ids only; the job itself is in the agent's database. */
export const JobQueued = Type.Object({ jobId: Type.String({ minLength: 1, maxLength: 64 }) })
export type JobQueued = Static<typeof JobQueued>

/** One event of a job's stream (GET /agent/job/:id/events), as stored and as broadcast. */
export const JobEvent = Type.Object({
  jobId: Type.String(),
  seq: Type.Integer({ minimum: 1, description: 'the SSE id: 1, 2, 3 … per job' }),
  type: Type.Union([Type.Literal('status'), Type.Literal('step')]),
  at: EpochMs(),
  data: Type.Union([
    Type.Object({
      status: JobStatusSchema,
      result: Type.Optional(JobResult),
      error: Type.Optional(Type.String()),
      approval: Type.Optional(Approval),
      notice: Type.Optional(Type.String({ description: 'awaiting_approval: what waits and where to decide it, in plain words' })),
    }),
    Type.Object({
      step: Type.Integer({ minimum: 1 }),
      tool: Type.String(),
      phase: Type.Union([Type.Literal('started'), Type.Literal('finished'), Type.Literal('failed')]),
      input: Type.Optional(Type.Unknown()),
      error: Type.Optional(Type.String()),
    }),
  ]),
})
export type JobEvent = Static<typeof JobEvent>

/**
 * A piece of a running job's answer text, broadcast as the model produces it: never stored, so
 * it has no seq. `offset` is where `text` starts in the job's result text, so a follower that
 * missed a piece sees the gap (and takes the rest from the complete event).
 */
export const JobDelta = Type.Object({
  jobId: Type.String(),
  type: Type.Literal('delta'),
  at: EpochMs(),
  data: Type.Object({
    text: Type.String({ minLength: 1 }),
    offset: Type.Integer({ minimum: 0, description: 'the character offset of text in the answer text' }),
  }),
})
export type JobDelta = Static<typeof JobDelta>

/** What a job's event subject carries: its stored events and the live deltas of its text. */
export const JobBroadcast = Type.Union([JobEvent, JobDelta])
export type JobBroadcast = Static<typeof JobBroadcast>

const day = 86_400_000

export function agentChannels(namespace: string) {
  /** the work queue of jobs (JetStream, work-queue retention): POST /agent/prompt publishes, workers pull */
  const jobs = topic(subjectOf(namespace, 'agent', 'jobs.queued'), JobQueued)
  return {
    jobs,
    // a week, so a worker outage of days loses nothing; a job published twice within 10 minutes is queued once
    jobsStream: {
      name: `${namespace}_agent_jobs`,
      subjects: [jobs.subject],
      maxAgeMs: 7 * day,
      duplicateWindowMs: 600_000,
      retention: 'workqueue' as const,
    },
    /** the durable pull consumer every worker shares */
    workers: 'agent-workers',
    /** broadcast: a job was cancelled; the worker running it aborts */
    cancelled: topic(subjectOf(namespace, 'agent', 'jobs.cancelled'), JobQueued),
    /** broadcast of each stored event and each text delta, per job: SSE streams forward them */
    events: (jobId: string) => topic(subjectOf(namespace, 'agent', `events.${jobId}`), JobBroadcast),
  }
}
export type AgentChannels = ReturnType<typeof agentChannels>
