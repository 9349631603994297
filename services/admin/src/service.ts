import { fileURLToPath } from 'node:url'
import { keyRevoked, keyVerify, services } from '@ats/contracts'
import { addNatsService, publish, serveEndpoint, type ServiceDefinition } from '@ats/service-kit'
import { Type } from 'typebox'
import { PrismaClient } from './generated/prisma/client.ts'
import { createKeyStore } from './keys/keyStore.ts'
import { keyRoutes } from './routes/keys.ts'

const settings = {
  ADMIN_API_KEY: Type.Optional(
    Type.String({
      minLength: 24,
      secret: true,
      description: 'bootstrap admin key, seeded (hashed) at start; changing it revokes the previous one',
    }),
  ),
}

export const adminService: ServiceDefinition<typeof settings, PrismaClient> = {
  name: 'admin',
  version: '0.1.0',
  port: 3005,
  settings,
  database: {
    schema: 'admin',
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { db, nc, config, version, onClose }) {
    const keys = createKeyStore(db)

    if (config.ADMIN_API_KEY) {
      const { revoked, state } = await keys.seedBootstrap(config.ADMIN_API_KEY)
      for (const key of revoked) publish(nc, keyRevoked, { id: key.id, hash: key.hash })
      if (state === 'revoked') app.log.warn('ADMIN_API_KEY was revoked by an admin and stays revoked: set a new one')
      else app.log.info({ state, retired: revoked.length }, 'bootstrap admin key ready')
    }

    const nats = await addNatsService(nc, services.admin.name, version, 'API keys, payments ledger, revenue')
    onClose(async () => {
      await nats.stop()
    })
    serveEndpoint(nats, 'keys-verify', keyVerify, app.log, async ({ hash }) => ({ key: await keys.findActiveByHash(hash) }))

    await app.register(keyRoutes, { keys, nc })
  },
}
