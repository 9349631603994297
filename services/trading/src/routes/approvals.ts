// The approvals of held swaps: list, read, approve, reject (the gateway lets readwrite and admin keys in).
import { approvalRoutes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import type { ApprovalStore } from '../approvals/approvals.ts'
import type { Decisions } from '../approvals/decisions.ts'

export async function approvalsRoutes(app: FastifyInstance, { store, decisions }: { store: ApprovalStore; decisions: Decisions }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...approvalRoutes.approvals,
    handler: async (request) => {
      const { identity } = request
      // a key sees its own, and a wallet-bound key its payer's too (agent jobs paid by that wallet); an admin key every one
      const owners = identity.tier === 'admin' ? null : { keyId: identity.keyId, wallet: identity.wallet }
      const rows = await store.list(owners, request.query.status, request.query.limit)
      return { approvals: rows.map((row) => store.view(row)) }
    },
  })

  api.route({ ...approvalRoutes.approval, handler: async (request) => decisions.get(request.params.id, request.identity) })

  api.route({ ...approvalRoutes.approve, handler: async (request) => decisions.approve(request.params.id, request.identity) })

  api.route({
    ...approvalRoutes.reject,
    // the reason is optional, and so is the body that carries it
    preValidation: async (request) => {
      request.body ??= {}
    },
    handler: async (request) => decisions.reject(request.params.id, request.identity, request.body?.reason),
  })
}
