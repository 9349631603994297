import { Type } from 'typebox'
import { route } from '../common/route.ts'

export const gatewayRoutes = {
  health: route({
    method: 'GET',
    url: '/health',
    summary: 'Liveness of the gateway',
    schema: { response: { 200: Type.Object({ ok: Type.Boolean(), ts: Type.Integer() }) } },
  }),
  root: route({
    method: 'GET',
    url: '/',
    summary: 'Service name, version, chain and where the API docs are',
    schema: {
      response: {
        200: Type.Object({
          name: Type.String(),
          version: Type.String(),
          chain: Type.String(),
          chainId: Type.Integer(),
          docs: Type.Optional(Type.String({ description: 'the interactive API reference' })),
          openapi: Type.Optional(Type.String({ description: 'the OpenAPI document' })),
        }),
      },
    },
  }),
  openapi: route({
    method: 'GET',
    url: '/openapi.json',
    summary: 'This OpenAPI document',
    schema: { response: { 200: Type.Object({}, { additionalProperties: true }) } },
  }),
}
