import { adminRoutes, blockedPayerCodec } from '@ats/contracts'
import { NotFound, type Logger, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { KV } from 'nats'

/** The blocked-payers bucket that every gateway watches: list it, take a payer off it. */
export async function payersRoutes(app: FastifyInstance, { blockedPayers, log }: { blockedPayers: KV; log: Logger }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...adminRoutes.listBlockedPayers,
    handler: async () => {
      // the keys first: awaiting a get inside the keys iterator ends it after the first key (nats.js 2.29)
      const keys: string[] = []
      for await (const key of await blockedPayers.keys()) keys.push(key)
      const payers = []
      for (const key of keys) {
        const entry = await blockedPayers.get(key)
        if (entry?.operation !== 'PUT') continue
        try {
          payers.push({ payer: key, ...blockedPayerCodec.decode(entry.value) })
        } catch (error) {
          // gateways skip such an entry too: the payer is not refused, so it is not listed
          log.warn({ err: error, payer: key }, 'unreadable blocked-payer entry skipped')
        }
      }
      return { payers: payers.sort((a, b) => a.since - b.since) }
    },
  })

  api.route({
    ...adminRoutes.unblockPayer,
    handler: async (request) => {
      const payer = request.params.address.toLowerCase()
      const entry = await blockedPayers.get(payer)
      if (entry?.operation !== 'PUT') throw new NotFound(`blocked payer ${payer}`)
      await blockedPayers.delete(payer)
      request.log.info({ payer, by: request.identity.keyId }, 'payer unblocked')
      return { ok: true as const, payer }
    },
  })
}
