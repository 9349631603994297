// The /grants routes: prepare a grant or its revocation for the user's wallet to send, and list a wallet's grants.
import { grantRoutes } from '@ats/contracts'
import { BadRequest, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import { getAddress, type Address, type Hex } from 'viem'
import type { Grants } from '../grants/grants.ts'
import { keyOf } from './caller.ts'

export async function grantsRoutes(
  app: FastifyInstance,
  { grants, boundWallet }: { grants: Grants; boundWallet: (keyId: string) => Promise<string | null> },
) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({ ...grantRoutes.prepareGrant, handler: async (request) => grants.prepareGrant(request.body) })

  api.route({
    ...grantRoutes.grants,
    handler: async (request) => {
      const wallet = request.query.wallet ?? (await boundWallet(keyOf(request)))
      if (!wallet) throw new BadRequest('wallet is required: this key is bound to no wallet (GET /grants?wallet=0x…)')
      return grants.list(getAddress(wallet) as Address)
    },
  })

  api.route({ ...grantRoutes.prepareRevoke, handler: async (request) => grants.prepareRevoke(request.params.id as Hex) })
}
