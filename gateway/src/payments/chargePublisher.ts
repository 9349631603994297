import { paymentsMessageId, type PaymentChannels, type PaymentCharged, type PaymentsCharged } from '@ats/contracts'
import {
  ROOT_CONTEXT,
  batchSpanSpec,
  ensureStream,
  publishTraced,
  traceContext,
  tracingEnabled,
  type Context,
  type Logger,
} from '@ats/service-kit'
import type { NatsConnection } from 'nats'

interface Waiter {
  charge: PaymentCharged
  done: () => void
  /** the paid request's trace, with tracing on */
  trace?: Context
}

const maxBatch = 512

export interface ChargePublisherOptions {
  /** how often unsent batches are tried again (1 s) */
  retryEveryMs?: number
  /**
   * how many unsent charges may wait in memory (10,000): at this many the gateway stops taking
   * paid requests (`accepting()` false, 503) until they are delivered
   */
  maxUnsent?: number
}

/**
 * Publishes charged payments to JetStream with group commit: while one publish is in
 * flight, the charges that arrive queue up and go together in the next message, so under
 * load one stream message (and one ack) serves many requests; alone, a charge is sent at
 * once. A charge resolves once JetStream has stored it. A batch that cannot be published
 * is kept and retried every second (its requests are answered meanwhile: a short NATS
 * outage must not fail paid requests that were served), by one retry loop at a time (two
 * would each send the oldest batch and each drop one), in order. What waits is
 * bounded: at `maxUnsent` charges `accepting()` turns false and the paid routes answer 503
 * (nothing verified, nothing charged) rather than serve what could not be recorded. What is
 * still unsent at shutdown is logged by payer, nonce and amount, never with its signature: a
 * signed authorization in a log would let anyone who reads it move the payer's money.
 */
export async function createChargePublisher(
  nc: NatsConnection,
  channels: PaymentChannels,
  log: Logger,
  options: ChargePublisherOptions = {},
) {
  const { retryEveryMs = 1_000, maxUnsent = 10_000 } = options
  await ensureStream(nc, channels.streamSpec)
  const js = nc.jetstream()
  const queued: Waiter[] = []
  const unsent: PaymentsCharged[] = []
  let unsentCharges = 0
  let publishing = false

  const send = (batch: PaymentsCharged, waiters: Waiter[] = []) =>
    publishTraced(
      js,
      channels.charged.subject,
      channels.charged.message.encode(batch),
      { msgID: paymentsMessageId(batch), timeout: 5_000 },
      tracingEnabled()
        ? batchSpanSpec(
            waiters.map((w) => w.trace),
            ROOT_CONTEXT,
          )
        : undefined,
    )

  async function drain() {
    if (publishing) return
    publishing = true
    try {
      while (queued.length > 0) {
        const waiters = queued.splice(0, maxBatch)
        const batch = { charges: waiters.map((w) => w.charge) }
        try {
          if (unsent.length > 0) throw new Error('earlier payment events are still unsent')
          await send(batch, waiters)
        } catch (error) {
          unsent.push(batch)
          unsentCharges += batch.charges.length
          log.error({ err: error, unsent: unsentCharges }, 'payment events not published yet; retrying every second')
        }
        for (const w of waiters) w.done()
      }
    } finally {
      publishing = false
    }
  }

  // the one retry loop: only it takes batches off the front of `unsent` (drain only appends)
  let retrying: Promise<void> | undefined
  const retryUnsent = () => {
    retrying ??= (async () => {
      let delivered = 0
      try {
        while (unsent.length > 0) {
          try {
            await send(unsent[0]!)
          } catch {
            break
          }
          const sent = unsent.shift()!
          unsentCharges -= sent.charges.length
          delivered += sent.charges.length
        }
        if (delivered > 0) log.info({ delivered, unsent: unsentCharges }, 'unsent payment events delivered')
      } finally {
        retrying = undefined
      }
    })()
    return retrying
  }
  const timer = setInterval(() => {
    if (unsent.length > 0) void retryUnsent()
  }, retryEveryMs)
  timer.unref()

  return {
    /** resolves once the charge is stored in the stream, or kept for retry */
    charge(charge: PaymentCharged): Promise<void> {
      return new Promise((resolve) => {
        queued.push(tracingEnabled() ? { charge, done: resolve, trace: traceContext.active() } : { charge, done: resolve })
        void drain()
      })
    },
    /** false while `maxUnsent` charges wait to be published: take no paid request until they are */
    accepting: () => unsentCharges < maxUnsent,
    /** how many charges wait to be published again */
    unsentCount: () => unsentCharges,
    async close() {
      clearInterval(timer)
      await retryUnsent()
      if (unsent.length > 0) {
        const events = unsent
          .flatMap((b) => b.charges)
          .map(({ payer, authorization, requestId }) => ({
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
