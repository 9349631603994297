import { adminRoutes, walletControlCodec, walletControlKey, walletRunning, type WalletControl } from '@ats/contracts'
import { Unavailable, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { KV } from 'nats'

/**
 * The server wallet's kill switch: one entry of a KV bucket that every trading and automation
 * replica watches (@ats/wallet's watchWalletControl), so a pause applies everywhere within a second.
 */
export async function walletRoutes(app: FastifyInstance, { bucket }: { bucket: KV }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  async function read(): Promise<WalletControl> {
    const entry = await bucket.get(walletControlKey)
    return entry?.operation === 'PUT' ? walletControlCodec.decode(entry.value) : walletRunning
  }

  async function write(state: WalletControl): Promise<WalletControl> {
    await bucket.put(walletControlKey, walletControlCodec.encode(state)).catch((error: Error) => {
      throw new Unavailable(`the kill switch could not be written (${error.message}); nothing changed`)
    })
    return state
  }

  api.route({ ...adminRoutes.walletState, handler: async () => read() })

  api.route({
    ...adminRoutes.pauseWallet,
    handler: async (request) => {
      const reason = request.body.reason ?? 'paused by an admin'
      const state = await write({ paused: true, reason, since: Date.now(), by: request.identity.keyId ?? null })
      request.log.warn({ by: state.by, reason }, 'server wallet paused')
      return state
    },
  })

  api.route({
    ...adminRoutes.resumeWallet,
    handler: async (request) => {
      const state = await write({ paused: false, reason: null, since: Date.now(), by: request.identity.keyId ?? null })
      request.log.warn({ by: state.by }, 'server wallet resumed')
      return state
    },
  })
}
