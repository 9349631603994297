import { adminRoutes, hashApiKey, type AdminChannels } from '@ats/contracts'
import { NotFound, publish, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { NatsConnection } from 'nats'
import type { KeyStore } from '../keys/keyStore.ts'

/** API keys: made, listed, given a spend policy, revoked; creations and revocations are broadcast to every gateway. */
export async function keysRoutes(
  app: FastifyInstance,
  { keys, nc, channels }: { keys: KeyStore; nc: NatsConnection; channels: AdminChannels },
) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...adminRoutes.createKey,
    handler: async (request, reply) => {
      const { tier, label, policy, wallet } = request.body
      const created = await keys.create(tier, label, policy, wallet)
      // every gateway caches the new key before its creator has it: it works at once, even from a
      // client address refused for unknown keys (flushed, so the broadcast leaves before the 201)
      try {
        publish(nc, channels.keyCreated, { id: created.id, hash: hashApiKey(created.key), tier: created.tier, wallet: created.wallet })
        await nc.flush()
      } catch (error) {
        request.log.warn({ err: error, keyId: created.id }, 'key creation not broadcast: gateways look the key up at its first use')
      }
      request.log.info({ keyId: created.id, tier, policy, wallet, by: request.identity.keyId }, 'api key created')
      return reply.code(201).send(created)
    },
  })

  api.route({
    ...adminRoutes.listKeys,
    handler: async () => ({ keys: await keys.listActive() }),
  })

  api.route({
    ...adminRoutes.setKeyPolicy,
    handler: async (request) => {
      const entry = await keys.setPolicy(request.params.id, request.body.policy)
      if (!entry) throw new NotFound(`active key ${request.params.id}`)
      request.log.info({ keyId: entry.id, policy: entry.policy, by: request.identity.keyId }, 'api key spend policy set')
      return entry
    },
  })

  api.route({
    ...adminRoutes.revokeKey,
    handler: async (request) => {
      const revoked = await keys.revoke(request.params.id)
      if (!revoked) throw new NotFound(`active key ${request.params.id}`)
      publish(nc, channels.keyRevoked, { id: revoked.id, hash: revoked.hash })
      request.log.info(
        {
          keyId: revoked.id,
          by: request.identity.keyId,
          webhooksDisabled: revoked.webhooks.disabled,
          deliveriesCancelled: revoked.webhooks.cancelled,
        },
        'api key revoked',
      )
      return { ok: true as const, id: revoked.id, revokedAt: revoked.revokedAt }
    },
  })
}
