// Hands jobs to the workers over the JetStream work queue. A job is stored first and enqueued
// after: one whose enqueue failed (NATS down) stays pending and the sweeper enqueues it later.
import type { AgentChannels } from '@ats/contracts'
import { ensureStream, publishTraced, startOutbox, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { JobStore } from './store.ts'

/** What a publisher of the store's rows (the queue, payment outcomes, credit usage) is given. */
export interface StorePublisherDeps<Channels> {
  nc: NatsConnection
  channels: Channels
  store: JobStore
  log: Logger
}

export async function createJobQueue({ nc, channels, store, log }: StorePublisherDeps<AgentChannels>) {
  await ensureStream(nc, channels.jobsStream)
  const js = nc.jetstream()
  // the job id is the message id, so a repeat is stored once
  const outbox = startOutbox({
    name: 'job-queue',
    log,
    publish: async (jobId) => {
      // traced: the worker that runs the job continues the trace of the request that submitted it
      await publishTraced(js, channels.jobs.subject, channels.jobs.message.encode({ jobId }), { msgID: jobId })
      await store.markEnqueued([jobId])
    },
    unpublished: async (olderThan, limit) => (await store.notEnqueued(olderThan, limit)).map((job) => job.id),
  })
  /** true once JetStream stored it; false when the sweep will enqueue it later */
  return { enqueue: outbox.send, stop: outbox.stop }
}
export type JobQueue = Awaited<ReturnType<typeof createJobQueue>>
