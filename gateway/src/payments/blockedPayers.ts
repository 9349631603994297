import { blockedPayerCodec, type BlockedPayer } from '@ats/contracts'
import { openBucket } from '@ats/service-kit'
import type { Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'

/**
 * Payers refused at the edge because a payment of theirs could not settle (admin writes
 * them to a JetStream KV bucket). Every gateway watches the bucket: it starts with the
 * whole list and sees each change as it happens.
 */
export async function watchBlockedPayers(nc: NatsConnection, bucket: string, log: Logger) {
  const blocked = new Map<string, BlockedPayer>()
  const kv = await openBucket(nc, bucket)
  let initialized!: () => void
  const ready = new Promise<void>((resolve) => (initialized = resolve))
  const watch = await kv.watch({ initializedFn: () => initialized() })
  void (async () => {
    for await (const entry of watch) {
      if (entry.operation !== 'PUT') {
        blocked.delete(entry.key)
        continue
      }
      try {
        const value = blockedPayerCodec.decode(entry.value)
        blocked.set(entry.key, value)
        log.warn({ payer: entry.key, reason: value.reason }, 'payer blocked')
      } catch (error) {
        log.warn({ err: error, payer: entry.key }, 'unreadable blocked-payer entry ignored')
      }
    }
  })()
  await ready
  return {
    /** why this lower-case address is refused, or undefined */
    reasonFor: (payer: string) => blocked.get(payer)?.reason,
    close: () => watch.stop(),
  }
}

export type BlockedPayers = Awaited<ReturnType<typeof watchBlockedPayers>>
