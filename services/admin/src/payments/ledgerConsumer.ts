import type { PaymentChannels, PaymentCharged } from '@ats/contracts'
import { startDurableConsumer, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import { recorderOptions, recording } from '../credit/consumers.ts'
import type { Ledger } from './ledger.ts'

/**
 * Records charged payments from the payments stream. Replicas share the consumer; the ledger's
 * unique (payer, nonce) makes a redelivery harmless. A message whose payments cannot be stored (a
 * value over Postgres' bigint, say) goes to the dead letters instead of blocking the ones behind it.
 */
export function startLedgerConsumer(nc: NatsConnection, channels: PaymentChannels, ledger: Ledger, log: Logger, retryDelayMs: number) {
  return startDurableConsumer({
    nc,
    log,
    ...recorderOptions(channels, retryDelayMs),
    durable: channels.ledgerConsumer,
    topic: channels.charged,
    // one INSERT records a batch: under load, a batch that waits 20 ms for more payments costs the
    // admin less CPU per payment; a payment is recorded that much later, nothing else
    lingerMs: 20,
    handle: async (batch) => {
      const events: PaymentCharged[] = batch.flatMap((d) => d.message.charges)
      const recorded = await recording(`recording ${events.length} payments`, ledger.record(events))
      if (recorded > 0) log.info({ recorded, received: events.length }, 'payments recorded')
    },
  })
}
