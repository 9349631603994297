import { hashApiKey, type NatsChannels, type Tier } from '@ats/contracts'
import { callEndpoint, subscribe } from '@ats/service-kit'
import type { FastifyBaseLogger } from 'fastify'
import type { NatsConnection } from 'nats'

export interface ResolvedKey {
  id: string
  tier: Tier
}

interface Entry {
  key: ResolvedKey | null
  expires: number
}

const maxEntries = 50_000
/** Unknown keys are remembered briefly, so a client retrying a bad key does not cost a round trip each time. */
const negativeTtlMs = 5_000

/**
 * Resolves raw API keys to their entry: in memory first, else one NATS request to
 * admin (concurrent misses for the same key share it). Revocation broadcasts evict
 * at once; after a NATS reconnect, when a broadcast may have been missed, the
 * whole cache is dropped.
 */
export function createKeyResolver(nc: NatsConnection, { keyVerify, keyRevoked }: NatsChannels, log: FastifyBaseLogger, ttlMs: number) {
  const cache = new Map<string, Entry>()
  const inFlight = new Map<string, Promise<ResolvedKey | null>>()

  const remember = (hash: string, key: ResolvedKey | null) => {
    if (cache.size >= maxEntries) cache.delete(cache.keys().next().value as string)
    cache.set(hash, { key, expires: Date.now() + (key ? ttlMs : Math.min(ttlMs, negativeTtlMs)) })
  }

  const unsubscribe = subscribe(nc, keyRevoked, log, ({ hash }) => {
    cache.delete(hash)
  })
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'reconnect') {
        cache.clear()
        log.info('NATS reconnected: key cache cleared')
      }
    }
  })()

  return {
    /** The cached answer for a key, or undefined when it must be resolved. */
    cached(raw: string): ResolvedKey | null | undefined {
      const hit = cache.get(hashApiKey(raw))
      return hit && hit.expires > Date.now() ? hit.key : undefined
    },

    async resolve(raw: string): Promise<ResolvedKey | null> {
      const hash = hashApiKey(raw)
      const hit = cache.get(hash)
      if (hit && hit.expires > Date.now()) return hit.key
      let pending = inFlight.get(hash)
      if (!pending) {
        pending = callEndpoint(nc, keyVerify, { hash })
          .then(({ key }) => {
            remember(hash, key)
            return key
          })
          .finally(() => inFlight.delete(hash))
        inFlight.set(hash, pending)
      }
      return pending
    },
    size: () => cache.size,
    close: unsubscribe,
  }
}

export type KeyResolver = ReturnType<typeof createKeyResolver>
