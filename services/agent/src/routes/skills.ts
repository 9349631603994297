import { agentRoutes, type Skill } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'

export async function skillsRoutes(app: FastifyInstance, { skills }: { skills: readonly Skill[] }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...agentRoutes.skills,
    handler: async () => ({ skills: [...skills] }),
  })
}
