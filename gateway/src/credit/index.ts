// Prepaid credit at the edge, put together: the Redis copy, the publisher to the ledger's stream,
// the consumer of the ledger's adjustments, sign-in and sessions, and the guard the paid routes use.
import type { NatsChannels } from '@ats/contracts'
import { callEndpoint, type ChainContext, type Logger, type ServiceConfig } from '@ats/service-kit'
import type { Redis } from 'ioredis'
import type { NatsConnection } from 'nats'
import type { gatewaySettings } from '../settings.ts'
import { startAdjustmentConsumer } from './adjustments.ts'
import { createCreditGuard } from './creditGuard.ts'
import { createCreditPublisher } from './creditPublisher.ts'
import { createCreditStore } from './creditStore.ts'
import { createSessions } from './sessions.ts'
import { createSignIn } from './signIn.ts'

export interface CreditDeps {
  config: ServiceConfig<typeof gatewaySettings>
  nc: NatsConnection
  channels: NatsChannels
  redis: Redis
  chain: ChainContext
  log: Logger
}

export async function createCredit({ config, nc, channels, redis, chain, log }: CreditDeps) {
  const stream = channels.admin.credit
  const store = createCreditStore({
    redis,
    namespace: config.NATS_NAMESPACE,
    snapshot: async (wallet) => {
      const reply = await callEndpoint(nc, channels.admin.creditSnapshot, { wallet: wallet.toLowerCase() }, { timeoutMs: 5_000 })
      return { available: BigInt(reply.available), entry: BigInt(reply.entry) }
    },
    idTtlMs: stream.streamSpec.duplicateWindowMs,
    adjustmentTtlMs: stream.streamSpec.maxAgeMs,
  })
  const publisher = await createCreditPublisher(nc, stream, log)
  const adjustments = await startAdjustmentConsumer(nc, stream, store, log)
  const signIn = createSignIn({
    redis,
    namespace: config.NATS_NAMESPACE,
    chainId: chain.chainId,
    secret: config.INTERNAL_TOKEN,
    challengeTtlSeconds: config.CREDIT_SIGN_IN_TTL_SECONDS,
  })
  const sessions = createSessions({ redis, namespace: config.NATS_NAMESPACE, ttlMs: config.CREDIT_SESSION_TTL_SECONDS * 1000 })
  const guard = createCreditGuard({
    store,
    publisher,
    signIn,
    sessions,
    log,
    publicUrl: config.PUBLIC_URL,
    port: config.PORT,
    meteredHold: BigInt(config.CREDIT_METERED_HOLD),
  })
  return {
    guard,
    store,
    async close() {
      await adjustments.stop()
      await publisher.close()
    },
  }
}
