import { creditHeaders, creditRoutes as routes, identityHeaders } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { CreditLedger } from '../credit/creditLedger.ts'
import type { Withdrawals } from '../credit/withdrawals.ts'
import { CreditWalletNotAllowed, TopupWithoutPayment, WithdrawalWithoutKey } from '../errors.ts'

/**
 * Prepaid credit's routes: the answer of a paid top-up, a wallet's credit, withdrawals. The wallet
 * is the one the gateway names: the signed-in wallet of a credit request (x-ats-credit-wallet), a
 * key's bound wallet, or, for an admin key, the one asked for (?wallet=).
 */
export async function creditRoutes(app: FastifyInstance, { ledger, withdrawals }: { ledger: CreditLedger; withdrawals: Withdrawals }) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  const header = (request: FastifyRequest, name: string) => {
    const value = request.headers[name]
    return typeof value === 'string' && value !== '' ? value : undefined
  }

  api.route({
    ...routes.topUp,
    handler: async (request, reply) => {
      // `<payer>:<nonce>`, lower-case: the payment the gateway verified for this request
      const [payer, nonce] = (header(request, identityHeaders.payment) ?? '').split(':')
      if (!payer || !nonce) throw new TopupWithoutPayment()
      const amount = BigInt(request.query.amount)
      await ledger.topUpPaid(payer, nonce, amount)
      return reply.code(202).send({ wallet: payer, amount: String(amount), state: 'pending' as const, nonce })
    },
  })

  api.route({
    ...routes.credit,
    handler: async (request) => {
      const signedIn = header(request, creditHeaders.wallet)?.toLowerCase()
      const bound = request.identity.wallet?.toLowerCase()
      const asked = request.query.wallet?.toLowerCase()
      let wallet: string | undefined
      if (request.identity.tier === 'admin' && asked) wallet = asked
      else if (asked && asked !== (signedIn ?? bound))
        throw new CreditWalletNotAllowed('this caller may read the credit of its own wallet only')
      else wallet = signedIn ?? bound
      if (!wallet) {
        throw new CreditWalletNotAllowed(
          'name the wallet: sign in with it (SIWx or a session token), use a key bound to it, or an admin key with ?wallet=',
        )
      }
      const a = await ledger.account(wallet)
      return {
        wallet,
        // below zero only if a gateway's copy was wrong (reconciliation reports it)
        available: String(a.available > 0n ? a.available : 0n),
        balance: String(a.balance),
        held: String(a.held),
        pendingTopUps: a.pending.map((t) => ({ amount: String(t.amount), nonce: t.nonce, at: t.createdAt.getTime() })),
        recent: a.recent.map((e) => ({
          id: String(e.id),
          kind: e.kind,
          amount: String(e.amount),
          ref: e.ref,
          route: e.route,
          at: e.at.getTime(),
        })),
      }
    },
  })

  api.route({
    ...routes.withdraw,
    handler: async (request, reply) => {
      // the gateway took the withdrawal from this wallet's credit under this key before forwarding it
      const wallet = header(request, creditHeaders.wallet)?.toLowerCase()
      if (!wallet) throw new CreditWalletNotAllowed('a withdrawal is made signed in with the wallet (SIWx or a session token)')
      const id = header(request, 'idempotency-key')
      if (!id) throw new WithdrawalWithoutKey()
      const { status, body } = await withdrawals.withdraw(wallet, id)
      return reply.code(status).header('idempotency-key', id).send(body)
    },
  })
}
