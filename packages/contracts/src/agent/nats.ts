import { Type, type Static } from 'typebox'
import { topic, type Topic } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { EpochMs } from '../common/primitives.ts'
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

export interface AgentChannels {
  /** the work queue of jobs (JetStream, work-queue retention): POST /agent/prompt publishes, workers pull */
  jobs: Topic<JobQueued>
  jobsStream: { name: string; subjects: string[]; maxAgeMs: number; duplicateWindowMs: number; retention: 'workqueue' }
  /** the durable pull consumer every worker shares */
  workers: string
  /** broadcast: a job was cancelled; the worker running it aborts */
  cancelled: Topic<JobQueued>
  /** broadcast of each stored event, per job: SSE streams forward them */
  events(jobId: string): Topic<JobEvent>
}

const day = 86_400_000

export function agentChannels(namespace: string): AgentChannels {
  const jobs = topic(subjectOf(namespace, 'agent', 'jobs.queued'), JobQueued)
  return {
    jobs,
    // a week, so a worker outage of days loses nothing; a job published twice within 10 minutes is queued once
    jobsStream: { name: `${namespace}_agent_jobs`, subjects: [jobs.subject], maxAgeMs: 7 * day, duplicateWindowMs: 600_000, retention: 'workqueue' },
    workers: 'agent-workers',
    cancelled: topic(subjectOf(namespace, 'agent', 'jobs.cancelled'), JobQueued),
    events: (jobId) => topic(subjectOf(namespace, 'agent', `events.${jobId}`), JobEvent),
  }
}
