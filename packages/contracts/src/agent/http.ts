import { Type, type Static } from 'typebox'
import { ErrorBody } from '../common/errors.ts'
import { route } from '../common/route.ts'
import { PaymentRequiredSchema } from '../x402/requirements.ts'

export const Skill = Type.Object({
  name: Type.String(),
  url: Type.String({ description: 'where the capability is served: a path of this API for built-in skills' }),
  external: Type.Boolean({ description: 'false for built-in skills, true for external ones' }),
})
export type Skill = Static<typeof Skill>

// every /agent/* route is paid per request (x402)
const errors = { 402: PaymentRequiredSchema, 503: ErrorBody }

export const agentRoutes = {
  skills: route({
    method: 'GET',
    url: '/agent/skills',
    summary: "The agent's skills: built-in ones, then external ones",
    schema: { response: { 200: Type.Object({ skills: Type.Array(Skill) }), ...errors } },
  }),
}
