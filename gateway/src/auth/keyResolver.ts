import type { AdminChannels, Tier } from '@ats/contracts'
import { cachedLoader, callEndpoint, subscribe, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'

export interface ResolvedKey {
  id: string
  tier: Tier
  /** the wallet bound to the key, when one is */
  wallet: string | null
}

/** Unknown keys are remembered briefly, so a client retrying a bad key does not cost a round trip each time. */
const negativeTtlMs = 5_000

/**
 * Resolves API keys, by their SHA-256, to their entry: in memory first, else one NATS request to
 * admin (concurrent misses for the same key share it). Revocation broadcasts evict at once;
 * creation broadcasts cache the new key, so it works at once even from a client address refused
 * for unknown keys (which gets no lookup). After a NATS reconnect, when a broadcast may have been
 * missed, the whole cache is dropped.
 */
export function createKeyResolver(nc: NatsConnection, { keyVerify, keyRevoked, keyCreated }: AdminChannels, log: Logger, ttlMs: number) {
  const keys = cachedLoader<string, ResolvedKey | null>({
    max: 50_000,
    ttlMs,
    load: async (hash) => (await callEndpoint(nc, keyVerify, { hash })).key,
    ttlOf: (key) => (key ? ttlMs : Math.min(ttlMs, negativeTtlMs)),
  })

  const unsubscribers = [
    subscribe(nc, keyRevoked, log, ({ hash }) => keys.delete(hash)),
    subscribe(nc, keyCreated, log, ({ hash, ...key }) => keys.set(hash, key)),
  ]
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'reconnect') {
        keys.clear()
        log.info('NATS reconnected: key cache cleared')
      }
    }
  })()

  return {
    /** The cached answer for a key's hash (null: known invalid), or undefined when it must be resolved. */
    cached: (hash: string): ResolvedKey | null | undefined => keys.peek(hash),
    resolve: (hash: string): Promise<ResolvedKey | null> => keys.get(hash),
    close: () => {
      for (const unsubscribe of unsubscribers) unsubscribe()
    },
  }
}

export type KeyResolver = ReturnType<typeof createKeyResolver>
