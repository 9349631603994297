import { createRequire } from 'node:module'
import type { ensureStream } from '@ats/service-kit'

/**
 * The bench's view of its payments stream: how far the admin's ledger consumer is behind,
 * and removing the stream (and the blocked-payers bucket) at the end. `nats` is loaded from
 * @ats/service-kit, whose dependency it is (the root package has none).
 */
type NatsConnection = Parameters<typeof ensureStream>[0]
const nats = createRequire(new URL('../packages/service-kit/package.json', import.meta.url))('nats') as {
  connect(options: { servers: string; name?: string }): Promise<NatsConnection>
}

export interface Backlog {
  /** the stream's last sequence number: how many events were ever published to it */
  published: number
  /** not yet delivered to the consumer */
  pending: number
  /** delivered, not yet acknowledged */
  unacked: number
}

export async function openPaymentsStream(servers: string, stream: string, consumer: string) {
  const nc = await nats.connect({ servers, name: 'bench' })
  const jsm = await nc.jetstreamManager()

  async function backlog(): Promise<Backlog> {
    const [info, consumerInfo] = await Promise.all([
      jsm.streams.info(stream),
      jsm.consumers.info(stream, consumer).catch(() => undefined), // not created yet
    ])
    return {
      published: info.state.last_seq,
      pending: consumerInfo ? consumerInfo.num_pending : info.state.messages,
      unacked: consumerInfo?.num_ack_pending ?? 0,
    }
  }

  /**
   * Waits until every published event is acknowledged by the consumer and nothing new came in
   * for a moment; ms it took. Throws after `timeoutMs`, saying how many are still pending.
   */
  async function caughtUp(timeoutMs: number): Promise<number> {
    const started = performance.now()
    let last: Backlog | undefined
    for (;;) {
      const now = await backlog()
      if (now.pending === 0 && now.unacked === 0 && last?.published === now.published) return performance.now() - started
      if (performance.now() - started > timeoutMs)
        throw new Error(
          `the admin's ledger consumer did not catch up within ${timeoutMs / 1000} s: ` +
            `${now.pending} payment events pending, ${now.unacked} unacknowledged, of ${now.published} published to stream ${stream}`,
        )
      last = now
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }

  /** Deletes these streams where they exist (a KV bucket is the stream KV_<bucket>). */
  async function remove(streams: string[]) {
    for (const name of streams) {
      await jsm.streams.delete(name).catch((error: Error) => {
        if (!/stream not found/i.test(error.message)) throw error
      })
    }
  }

  return { backlog, caughtUp, remove, close: () => nc.close() }
}
