import type { PaymentChannels, PaymentCharged } from '@ats/contracts'
import { startDurableConsumer, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { Ledger } from './ledger.ts'

/**
 * Records charged payments from the payments stream through the kit's durable consumer: a
 * message is acked only once its payments are in the ledger, so an admin that is down or
 * restarting loses nothing and catches up from where it stopped. Replicas share the consumer;
 * the ledger's unique (payer, nonce) makes a redelivery harmless. A message whose payments
 * cannot be stored (a value over Postgres' bigint, say) goes to the dead letters after
 * bounded tries, `retryDelayMs` apart, instead of blocking the ones behind it.
 */
export function startLedgerConsumer(nc: NatsConnection, channels: PaymentChannels, ledger: Ledger, log: Logger, retryDelayMs: number) {
  return startDurableConsumer({
    nc,
    log,
    stream: channels.streamSpec,
    durable: channels.ledgerConsumer,
    topic: channels.charged,
    deadLetterSubject: channels.deadLetters,
    maxDeliveries: 3,
    retryDelayMs,
    // one INSERT records a batch: under load, a batch that waits 20 ms for more payments costs the
    // admin less CPU per payment; a payment is recorded that much later, nothing else
    batchSize: 256,
    lingerMs: 20,
    handle: async (batch) => {
      const events: PaymentCharged[] = batch.flatMap((d) => d.message.charges)
      let recorded: number
      try {
        recorded = await ledger.record(events)
      } catch (error) {
        // Prisma puts the cause on the last line of its message: that is the reason worth keeping
        const lines = (error instanceof Error ? error.message : String(error)).split('\n').map((l) => l.trim())
        throw new Error(`recording ${events.length} payments failed: ${lines.filter(Boolean).at(-1) ?? 'unknown error'}`, { cause: error })
      }
      if (recorded > 0) log.info({ recorded, received: events.length }, 'payments recorded')
    },
  })
}
