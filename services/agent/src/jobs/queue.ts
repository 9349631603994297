// Hands jobs to the workers over the JetStream work queue. A job is stored first and enqueued
// after: one whose enqueue failed (NATS down) stays pending and the sweeper enqueues it later.
import type { AgentChannels } from '@ats/contracts'
import { ensureStream, startWorkerLoop, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { JobStore } from './store.ts'

export async function createJobQueue({ nc, channels, store, log }: { nc: NatsConnection; channels: AgentChannels; store: JobStore; log: Logger }) {
  await ensureStream(nc, channels.jobsStream)
  const js = nc.jetstream()

  /** true once JetStream stored it; the job id is the message id, so a repeat is stored once */
  async function enqueue(jobId: string): Promise<boolean> {
    try {
      await js.publish(channels.jobs.subject, channels.jobs.message.encode({ jobId }), { msgID: jobId })
      await store.markEnqueued([jobId])
      return true
    } catch (error) {
      log.warn({ err: error, jobId }, 'job not enqueued yet; the sweeper retries')
      return false
    }
  }

  const sweeper = startWorkerLoop({
    name: 'job-sweeper',
    log,
    idleMs: 5_000,
    round: async () => {
      const stranded = await store.notEnqueued(new Date(Date.now() - 5_000), 100)
      for (const { id } of stranded) await enqueue(id)
      return false
    },
  })

  return { enqueue, stop: sweeper.stop }
}
export type JobQueue = Awaited<ReturnType<typeof createJobQueue>>
