import { paymentsMessageId, type PaymentChannels, type PaymentCharged, type PaymentsCharged } from '@ats/contracts'
import { ensureStream, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'

interface Waiter {
  charge: PaymentCharged
  done: () => void
}

const retryEveryMs = 1_000
const maxBatch = 512

/**
 * Publishes charged payments to JetStream with group commit: while one publish is in
 * flight, the charges that arrive queue up and go together in the next message, so under
 * load one stream message (and one ack) serves many requests; alone, a charge is sent at
 * once. A charge resolves once JetStream has stored it. A batch that cannot be published
 * is kept and retried every second (its requests are answered meanwhile: a short NATS
 * outage must not fail paid requests that were served); what is still unsent at shutdown
 * is logged by payer, nonce and amount, never with its signature: a signed authorization in a
 * log would let anyone who reads it move the payer's money.
 */
export async function createChargePublisher(nc: NatsConnection, channels: PaymentChannels, log: Logger) {
  await ensureStream(nc, channels.streamSpec)
  const js = nc.jetstream()
  const queued: Waiter[] = []
  const unsent: PaymentsCharged[] = []
  let publishing = false

  const send = (batch: PaymentsCharged) =>
    js.publish(channels.charged.subject, channels.charged.message.encode(batch), { msgID: paymentsMessageId(batch), timeout: 5_000 })

  async function drain() {
    if (publishing) return
    publishing = true
    try {
      while (queued.length > 0) {
        const waiters = queued.splice(0, maxBatch)
        const batch = { charges: waiters.map((w) => w.charge) }
        try {
          if (unsent.length > 0) throw new Error('earlier payment events are still unsent')
          await send(batch)
        } catch (error) {
          unsent.push(batch)
          log.error({ err: error, unsent: unsent.reduce((n, b) => n + b.charges.length, 0) }, 'payment events not published yet; retrying every second')
        }
        for (const w of waiters) w.done()
      }
    } finally {
      publishing = false
    }
  }

  async function retryUnsent() {
    let delivered = 0
    while (unsent.length > 0) {
      try {
        await send(unsent[0]!)
        delivered += unsent.shift()!.charges.length
      } catch {
        break
      }
    }
    if (delivered > 0) log.info({ delivered }, 'unsent payment events delivered')
  }
  const timer = setInterval(() => {
    if (unsent.length > 0) void retryUnsent()
  }, retryEveryMs)
  timer.unref()

  return {
    /** resolves once the charge is stored in the stream, or kept for retry */
    charge(charge: PaymentCharged): Promise<void> {
      return new Promise((resolve) => {
        queued.push({ charge, done: resolve })
        void drain()
      })
    },
    async close() {
      clearInterval(timer)
      await retryUnsent()
      if (unsent.length > 0) {
        const events = unsent.flatMap((b) => b.charges).map(({ payer, authorization, requestId }) => ({
          payer,
          nonce: authorization.nonce,
          value: authorization.value,
          requestId,
        }))
        log.error({ unsent: events.length, events }, 'payment events could not be published before shutdown')
      }
    },
  }
}

export type ChargePublisher = Awaited<ReturnType<typeof createChargePublisher>>
