import { paymentMessageId, type PaymentChannels, type PaymentCharged } from '@ats/contracts'
import { ensureStream } from '@ats/service-kit'
import type { FastifyBaseLogger } from 'fastify'
import type { NatsConnection } from 'nats'

interface Pending {
  data: Uint8Array
  msgID: string
}

const retryEveryMs = 1_000

/**
 * Publishes charged payments to JetStream, de-duplicated by (payer, nonce). A publish that
 * fails is kept and retried every second, so a short NATS outage loses no revenue; what is
 * still unsent at shutdown is logged in full (an authorization can be settled from the log).
 */
export async function createChargePublisher(nc: NatsConnection, channels: PaymentChannels, log: FastifyBaseLogger) {
  await ensureStream(nc, channels.streamSpec)
  const js = nc.jetstream()
  const outbox: Pending[] = []
  const send = (p: Pending) => js.publish(channels.charged.subject, p.data, { msgID: p.msgID, timeout: 5_000 })

  async function flush() {
    let delivered = 0
    while (outbox.length > 0) {
      try {
        await send(outbox[0]!)
        outbox.shift()
        delivered++
      } catch {
        return
      }
    }
    if (delivered > 0) log.info({ delivered }, 'unsent payment events delivered')
  }
  const timer = setInterval(() => {
    if (outbox.length > 0) void flush()
  }, retryEveryMs)
  timer.unref()

  return {
    async charge(event: PaymentCharged): Promise<void> {
      const pending = { data: channels.charged.message.encode(event), msgID: paymentMessageId(event.authorization.from, event.authorization.nonce) }
      try {
        if (outbox.length > 0) throw new Error('earlier payment events are still unsent')
        await send(pending)
      } catch (error) {
        outbox.push(pending)
        log.error({ err: error, unsent: outbox.length }, 'payment event not published yet; retrying every second')
      }
    },
    async close() {
      clearInterval(timer)
      await flush()
      if (outbox.length > 0) {
        const events = outbox.map((p) => JSON.parse(Buffer.from(p.data).toString('utf8')) as PaymentCharged)
        log.error({ unsent: outbox.length, events }, 'payment events could not be published before shutdown')
      }
    },
  }
}

export type ChargePublisher = Awaited<ReturnType<typeof createChargePublisher>>
