// The gateway's own credit route: POST /credit/session (the other /credit routes are admin's, proxied).
import type { FastifyInstance } from 'fastify'
import { creditWallet, type AuthDeps } from '../auth/authHook.ts'
import type { PaymentGuard } from '../payments/paymentGuard.ts'
import { creditCredentials, type CreditGuard } from './creditGuard.ts'
import { SESSION_EXPIRES_HEADER, SESSION_TOKEN_HEADER } from './sessions.ts'

export interface CreditRouteOptions {
  guard: CreditGuard
  pay: PaymentGuard
  auth: AuthDeps
}

/**
 * POST /credit/session, signed in with the wallet (SIGN-IN-WITH-X): a session token in JSON (the
 * same as the ATS-Session-Token header every signed-in answer carries). Without a sign-in: 402
 * whose PAYMENT-REQUIRED header carries the challenge, so `wrapFetchWithSIWx` signs in unmodified.
 */
export async function creditRoutes(app: FastifyInstance, { guard, pay, auth }: CreditRouteOptions) {
  app.post('/credit/session', async (request, reply) => {
    await auth.paid.address(request, reply)
    const credentials = creditCredentials(request)
    if (credentials?.kind !== 'sign-in') {
      return pay.required!(
        request,
        reply,
        'sign in with the wallet that holds the credit: answer this challenge in a SIGN-IN-WITH-X header',
      )
    }
    // a sign-in opens a session, named in the answer's headers (as on every signed-in answer)
    const wallet = await creditWallet(guard, auth.failures, request, reply)
    const token = String(reply.getHeader(SESSION_TOKEN_HEADER))
    return { token, wallet: wallet.toLowerCase(), expiresAt: String(reply.getHeader(SESSION_EXPIRES_HEADER)) }
  })
}
