// Credit the ledger gives (settled top-ups, released holds, refunds) added to the gateways' copy.
import type { creditChannels } from '@ats/contracts'
import { startDurableConsumer, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { CreditStore } from './creditStore.ts'

/**
 * The gateways share one durable consumer of adjustments: any gateway adds each to the copy in
 * Redis, once per ledger entry (the store remembers entries, whatever their order). A message is
 * acked once added; while Redis is down it is tried again for about an hour (never dropped
 * quickly: it is the payer's money), then kept in the dead letters with its reason.
 */
export function startAdjustmentConsumer(
  nc: NatsConnection,
  channels: ReturnType<typeof creditChannels>,
  store: CreditStore,
  log: Logger,
  retryDelayMs = 2_000,
) {
  return startDurableConsumer({
    nc,
    log,
    stream: channels.streamSpec,
    durable: channels.adjustedConsumer,
    topic: channels.adjusted,
    deadLetterSubject: channels.deadLetters,
    maxDeliveries: 1_800,
    retryDelayMs,
    handle: async (batch) => {
      for (const { message } of batch) await store.apply(message)
    },
  })
}
