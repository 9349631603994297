// What /metrics shows of the agent's jobs: how many reach each status, and the workers' queue.
import type { AgentChannels } from '@ats/contracts'
import type { CounterMetric, ServiceMetrics } from '@ats/service-kit'
import type { NatsConnection } from 'nats'

/** created (pending), then how it ended */
export const countedStatuses = ['pending', 'complete', 'failed', 'cancelled'] as const
export type CountedStatus = (typeof countedStatuses)[number]
export type JobCounter = CounterMetric<{ state: typeof countedStatuses }>

export const jobCounter = (metrics: ServiceMetrics): JobCounter =>
  metrics.counter({
    name: 'ats_agent_jobs_total',
    help: 'agent jobs created (pending) and finished (complete, failed, cancelled), counted by the process that changed their status',
    labels: { state: countedStatuses },
  })

/**
 * ats_agent_jobs_pending: the jobs the workers have not finished, queued or running (the
 * durable consumer's pending and unacknowledged messages: the lag KEDA scales on), read from
 * JetStream at each scrape.
 */
export async function watchJobQueue(metrics: ServiceMetrics, nc: NatsConnection, channels: AgentChannels) {
  const jsm = await nc.jetstreamManager()
  metrics.gauge({
    name: 'ats_agent_jobs_pending',
    help: `jobs queued for the workers or running (consumer ${channels.workers} of stream ${channels.jobsStream.name}: pending + ack pending)`,
    collect: async (gauge) => {
      const info = await jsm.consumers.info(channels.jobsStream.name, channels.workers)
      gauge.set({}, info.num_pending + info.num_ack_pending)
    },
  })
}
