// Who may pass a route group, and as whom: the onRequest hook of each group.
import { apiKeyPattern, hashApiKey, tierAllows } from '@ats/contracts'
import { Forbidden, Unauthorized, Unavailable } from '@ats/service-kit'
import type { FastifyReply, FastifyRequest, onRequestHookHandler, onSendHookHandler } from 'fastify'
import { AuthFailures, InsufficientCredit, PayerFailures, type PaymentRefused } from '../errors.ts'
import { paymentFromHeaders } from '../payments/header.ts'
import type { PaymentGuard } from '../payments/paymentGuard.ts'
import { creditCredentials, type CreditGuard } from '../credit/creditGuard.ts'
import type { KeyHeader, RouteAuth } from '../routing/routeTable.ts'
import type { AuthFailureLimiter } from './authFailures.ts'
import type { KeyResolver, ResolvedKey } from './keyResolver.ts'
import type { ConcurrencyLimiter } from './concurrency.ts'
import type { KeyLimiter, PaidLimiter } from './rateLimit.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** why the payment guard answered this paid request 402: counted against its payer, else the client address */
    paymentRefusal: PaymentRefused | null
  }
}

const bearer = /^Bearer\s+(\S+)\s*$/i

/**
 * The raw key of the request: Authorization: Bearer, or x-api-key where the group reads it too
 * (`keyHeaders`); a missing or malformed one is a 401 before any lookup.
 */
function rawKey(request: FastifyRequest, keyHeaders: readonly KeyHeader[]): string {
  const readsApiKey = keyHeaders.includes('x-api-key')
  const header = request.headers.authorization
  const apiKey = readsApiKey ? request.headers['x-api-key'] : undefined
  if (!header && apiKey === undefined) {
    throw new Unauthorized(`missing API key: send ${readsApiKey ? 'x-api-key: <key> or ' : ''}Authorization: Bearer <key>`)
  }
  const key = header ? bearer.exec(header)?.[1] : apiKey
  if (header && !key) throw new Unauthorized('malformed Authorization header: expected Bearer <key>')
  if (typeof key !== 'string' || !apiKeyPattern.test(key))
    throw new Unauthorized('malformed API key: keys are atsk_ followed by 32 characters')
  return key
}

export interface AuthDeps {
  keys: KeyResolver
  limit: KeyLimiter
  pay: PaymentGuard
  failures: AuthFailureLimiter
  paid: PaidLimiter
  concurrency: ConcurrencyLimiter
  /** requests in flight per key (MAX_CONCURRENT_PER_KEY) */
  maxPerKey: number
  /** prepaid credit, when payments are on */
  credit?: CreditGuard
}

/** whether the client sent a payment (a request without one is the 402 that asks for it, no failure) */
const sentPayment = (request: FastifyRequest) =>
  request.headers['x-payment'] !== undefined || request.headers['payment-signature'] !== undefined

export function authHook(auth: RouteAuth, deps: AuthDeps): onRequestHookHandler {
  const { keys, limit, pay, failures, paid, concurrency, maxPerKey, credit } = deps
  if (auth.kind === 'none') return async () => {}
  if (auth.kind === 'payment') return paidHook({ pay, failures, paid })
  if (auth.kind === 'credit') {
    const keyed = authHook({ kind: 'key', tier: 'readonly' }, deps)
    // the wallet's own credentials name it (the service reads x-ats-credit-wallet); else an API key
    return async function (this: unknown, request, reply) {
      if (!credit || !creditCredentials(request))
        return (keyed as (r: FastifyRequest, p: FastifyReply) => Promise<void>).call(this, request, reply)
      const wallet = await creditWallet(credit, failures, request, reply)
      request.credit = { wallet, amount: 0n, metered: false, route: `${request.method} ${request.url.split('?')[0]}` }
      request.identity = { ownerId: wallet }
      await paid.payer(request, reply, wallet)
    }
  }
  const need = auth.tier
  const keyHeaders = auth.keyHeaders ?? ['authorization']

  async function resolve(request: FastifyRequest, reply: FastifyReply): Promise<ResolvedKey> {
    let hash: string
    try {
      hash = hashApiKey(rawKey(request, keyHeaders))
    } catch (error) {
      refuseIfFlooding(failures, request, reply)
      await failures.addresses.failed(request.ip)
      throw error
    }
    let key = keys.cached(hash)
    if (key) return key
    refuseIfFlooding(failures, request, reply)
    if (key === undefined) {
      try {
        key = await keys.resolve(hash)
      } catch (error) {
        request.log.error({ err: error }, 'key verification failed')
        throw new Unavailable('API key verification is unavailable, try again shortly')
      }
    }
    if (!key) {
      await failures.addresses.failed(request.ip)
      throw new Unauthorized('invalid or revoked API key')
    }
    return key
  }

  // a metered group paid from a wallet's credit: the wallet's limits, then a hold the service reports the use of
  const meteredCredit =
    auth.credit === 'metered' && credit
      ? async (request: FastifyRequest, reply: FastifyReply) => {
          const wallet = await creditWallet(credit, failures, request, reply)
          await paid.payer(request, reply, wallet)
          concurrency.enter(request, reply, `wallet:${wallet.toLowerCase()}`, maxPerKey, 'wallet')
          const amount = credit.meteredHold
          const route = `${request.method} ${request.url.split('?')[0]}`
          const short = await credit.pay(request, reply, { wallet, amount, metered: true, route })
          if (short) throw new InsufficientCredit(wallet, short.available.toString(), 'request holds', amount.toString())
        }
      : undefined

  return async (request, reply) => {
    if (meteredCredit && creditCredentials(request)) return meteredCredit(request, reply)
    const key = await resolve(request, reply)
    if (!tierAllows(key.tier, need)) throw new Forbidden(`this route needs an API key of tier ${need} or higher; this key is ${key.tier}`)
    request.identity = { ownerId: key.id, keyId: key.id, tier: key.tier, ...(key.wallet ? { wallet: key.wallet } : {}) }
    await limit(request, reply)
    concurrency.enter(request, reply, `key:${key.id}`, maxPerKey, 'key')
  }
}

/**
 * The wallet of a request's credit credentials (a sign-in or a session token). A refused one (401)
 * counts as a failed authentication of the client address, as a bad key does: each costs a
 * signature check or a session lookup.
 */
export async function creditWallet(credit: CreditGuard, failures: AuthFailureLimiter, request: FastifyRequest, reply: FastifyReply) {
  refuseIfFlooding(failures, request, reply)
  try {
    return (await credit.walletOf(request, reply))!
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 401) await failures.addresses.failed(request.ip)
    throw error
  }
}

/** throws 429 while this client address is refused for failed authentications or payments */
function refuseIfFlooding(failures: AuthFailureLimiter, request: FastifyRequest, reply: FastifyReply) {
  const retryAfter = failures.addresses.retryAfter(request.ip)
  if (retryAfter === undefined) return
  reply.header('retry-after', retryAfter)
  throw new AuthFailures(retryAfter)
}

/**
 * Throws 429 while the payer the payment names is refused for refused payments. Read from the
 * header before its signature is checked: only the payer's own signed payments count toward the
 * refusal, so naming someone else's address refuses no one but the sender.
 */
function refuseIfPayerFlooding(failures: AuthFailureLimiter, request: FastifyRequest, reply: FastifyReply) {
  if (!failures.payers.refusing) return
  let payer: string | undefined
  try {
    payer = paymentFromHeaders(request.headers)?.authorization.from
  } catch {
    return // the payment guard answers what is wrong with it
  }
  if (payer === undefined) return
  const retryAfter = failures.payers.retryAfter(payer)
  if (retryAfter === undefined) return
  reply.header('retry-after', retryAfter)
  throw new PayerFailures(payer, retryAfter)
}

/**
 * Paid routes: before any payment check, which may cost a balance RPC call, the client address
 * and the payer named must not be refused for failed checks (countFailedPayments) and the address
 * must be within its paid rate limit; a verified payer is then counted against its own limit.
 */
function paidHook({ pay, failures, paid }: Pick<AuthDeps, 'pay' | 'failures' | 'paid'>): onRequestHookHandler {
  return async function (request, reply) {
    refuseIfFlooding(failures, request, reply)
    refuseIfPayerFlooding(failures, request, reply)
    await paid.address(request, reply)
    const answered = await (pay.onRequest as (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>).call(this, request, reply)
    if (answered === reply) return reply
    const payer = request.payment?.payer ?? request.credit?.wallet
    if (payer) await paid.payer(request, reply, payer)
  }
}

/**
 * The paid groups' onSend: a payment refused with 402 (in onRequest, or in preHandler for a
 * payment id) counts against the payer it names when its signature verified and the refusal is
 * theirs, else as a failed authentication of the client address, as a bad key does. In onSend,
 * so the count is in before the client reads its 402 and sends the next one.
 */
export function countFailedPayments(failures: AuthFailureLimiter): onSendHookHandler {
  return async (request, reply, payload) => {
    // a sign-in or session refused on a paid route (the payment guard checked it)
    if (reply.statusCode === 401 && creditCredentials(request)) await failures.addresses.failed(request.ip)
    if (reply.statusCode !== 402 || request.payment || !sentPayment(request)) return payload
    const payer = request.paymentRefusal?.payer
    if (payer) await failures.payers.failed(payer.toLowerCase())
    else await failures.addresses.failed(request.ip)
    return payload
  }
}
