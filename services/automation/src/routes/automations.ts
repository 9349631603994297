// The public routes of automations: list, create, read, pause or resume, delete, and the runs of one; each acts for the request's API key.
import { automationRoutes } from '@ats/contracts'
import { NotFound, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ownerOf, type Automations } from '../automations/automations.ts'
import { automationView, runView, type Store } from '../automations/store.ts'

const keyOwner = (request: FastifyRequest) => ownerOf({ keyId: request.identity.keyId })

export async function automationsRoutes(app: FastifyInstance, { store, automations }: { store: Store; automations: Automations }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...automationRoutes.list,
    handler: async (request) => ({ automations: (await store.list(keyOwner(request), request.query.wallet)).map(automationView) }),
  })

  api.route({
    ...automationRoutes.create,
    handler: async (request, reply) => reply.code(201).send(await automations.create(keyOwner(request), request.body)),
  })

  api.route({
    ...automationRoutes.get,
    handler: async (request) => {
      const row = await store.get(keyOwner(request), request.params.id)
      if (!row) throw new NotFound(`automation ${request.params.id}`)
      return { automation: automationView(row) }
    },
  })

  api.route({
    ...automationRoutes.update,
    handler: async (request) => automations.setStatus(keyOwner(request), request.params.id, request.body.status),
  })

  api.route({ ...automationRoutes.remove, handler: async (request) => automations.remove(keyOwner(request), request.params.id) })

  api.route({
    ...automationRoutes.runs,
    handler: async (request) => {
      const row = await store.get(keyOwner(request), request.params.id)
      if (!row) throw new NotFound(`automation ${request.params.id}`)
      return { runs: (await store.runs(row.id, request.query.limit)).map(runView) }
    },
  })
}
