import type { PaymentChannels, PaymentCharged } from '@ats/contracts'
import { ensureStream } from '@ats/service-kit'
import type { FastifyBaseLogger } from 'fastify'
import { AckPolicy, DeliverPolicy, nanos, type JsMsg, type NatsConnection } from 'nats'
import type { Ledger } from './ledger.ts'

const batchSize = 64
const fetchWaitMs = 1_000
const retryDelayMs = 2_000

/**
 * Records charged payments from the payments stream through a durable pull consumer with
 * explicit acks: a message is acked only once its payment is in the ledger, so an admin that
 * is down or restarting loses nothing and catches up from where it stopped. Replicas share
 * the consumer; the ledger's unique (payer, nonce) makes a redelivery harmless.
 */
export async function startLedgerConsumer(nc: NatsConnection, channels: PaymentChannels, ledger: Ledger, log: FastifyBaseLogger) {
  const jsm = await ensureStream(nc, channels.streamSpec)
  await jsm.consumers.add(channels.stream, {
    durable_name: channels.ledgerConsumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: channels.charged.subject,
    ack_wait: nanos(30_000),
    max_ack_pending: 10_000,
  })
  const consumer = await nc.jetstream().consumers.get(channels.stream, channels.ledgerConsumer)
  let running = true

  async function take(messages: JsMsg[]) {
    const events: PaymentCharged[] = []
    const good: JsMsg[] = []
    for (const m of messages) {
      try {
        events.push(...channels.charged.message.decode(m.data).charges)
        good.push(m)
      } catch (error) {
        // a message that can never be read is dropped, loudly, rather than redelivered forever
        log.error({ err: error, seq: m.seq }, 'payment event unreadable: dropped')
        m.term()
      }
    }
    try {
      const recorded = await ledger.record(events)
      for (const m of good) m.ack()
      if (recorded > 0) log.info({ recorded, received: events.length }, 'payments recorded')
    } catch (error) {
      log.error({ err: error, count: good.length }, 'recording payments failed; they will be redelivered')
      for (const m of good) m.nak(retryDelayMs)
    }
  }

  const done = (async () => {
    while (running) {
      try {
        const batch = await consumer.fetch({ max_messages: batchSize, expires: fetchWaitMs })
        const messages: JsMsg[] = []
        for await (const m of batch) messages.push(m)
        if (messages.length > 0) await take(messages)
      } catch (error) {
        if (!running || nc.isClosed()) break
        log.warn({ err: error }, 'payments stream fetch failed; retrying')
        await new Promise((resolve) => setTimeout(resolve, retryDelayMs))
      }
    }
  })()

  return {
    async stop() {
      running = false
      await done
    },
  }
}
