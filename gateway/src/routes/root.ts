import { gatewayRoutes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import { openApiDocument } from '../routing/openapi.ts'

/** The interactive API reference (GET / names it). */
export const docsUrl = '/docs'

export interface RootOptions {
  name: string
  version: string
  chain: string
  chainId: number
}

export async function rootRoutes(app: FastifyInstance, options: RootOptions) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  const document = openApiDocument(options.version)
  api.route({
    ...gatewayRoutes.root,
    handler: async () => ({
      name: options.name,
      version: options.version,
      chain: options.chain,
      chainId: options.chainId,
      docs: docsUrl,
      openapi: gatewayRoutes.openapi.url,
    }),
  })
  api.route({ ...gatewayRoutes.openapi, handler: async () => document })
  await app.register(async (scope) => {
    // the interactive reference of the same document (@fastify/swagger in static mode serves
    // it to the UI); the UI's assets come from the package, no CDN
    await scope.register(swagger, { mode: 'static', specification: { document: document as never } })
    await scope.register(swaggerUi, {
      routePrefix: docsUrl,
      uiConfig: { docExpansion: 'list', deepLinking: true, tryItOutEnabled: false, defaultModelsExpandDepth: 0 },
      staticCSP: true,
    })
  })
}
