import { usdcDomain } from '@ats/chain'
import {
  caip2Network,
  paidRequestDescription,
  paymentRequiredBody,
  paymentRequiredHeader,
  v1Network,
  jobIdHeader,
  settleOnJobComplete,
  type PaymentCharged,
  type PaymentTerms,
} from '@ats/contracts'
import { StartupError, Unavailable, type ChainContext, type Logger, type ServiceConfig } from '@ats/service-kit'
import { declarePaymentIdentifierExtension, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier'
import type { FastifyReply, FastifyRequest, onRequestHookHandler, onSendHookHandler, preHandlerHookHandler } from 'fastify'
import type { Redis } from 'ioredis'
import { getAddress, type Address } from 'viem'
import { createPayerChain, createReservations } from './reservations.ts'
import { discoveryFor } from './discovery.ts'
import { PaymentIdInProgress, PaymentIdNotStored, PaymentIdOtherPayment, PaymentIdReused, PaymentRefused } from '../errors.ts'
import { paidToolResources } from '../mcp/paid.ts'
import { mcpTools } from '../mcp/tools.ts'
import { createPaymentBinding } from './binding.ts'
import { authorizationJson, paymentFromHeaders, type Payment } from './header.ts'
import { createPaymentIdStore, requestFingerprint, type PaymentIdClaim, type RepeatTurn, type RunOutcome } from './paymentIds.ts'
import { answerOf, readAnswer, replay, type ReadAnswer } from './repeatAnswers.ts'
import { createPaymentVerifier, nonceUsed } from './verifier.ts'
import { creditCredentials, type CreditGuard, type CreditShort } from '../credit/creditGuard.ts'
import { InsufficientCredit, TopUpAmountInvalid } from '../errors.ts'
import type { BlockedPayers } from './blockedPayers.ts'
import type { ChargePublisher } from './chargePublisher.ts'
import type { gatewaySettings } from '../settings.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** the verified payment of a paid request, charged when the service answers below 400 */
    payment: { payment: Payment; payer: Address; route: string; resource: string } | null
  }
}

/** The owner of paid requests when SKIP_PAYMENT is on and no payment header names one. */
export const developmentOwner: Address = '0x000000000000000000000000000000000000dEaD'

/** The hooks of paid route groups: verify before the proxy, charge after the service answered. */
export interface PaymentGuard {
  onRequest: onRequestHookHandler
  /** a payment with a payment id: decided once the body is there (a run, the first answer again, or 409) */
  preHandler: preHandlerHookHandler
  onSend: onSendHookHandler
  /** answers 402 with this route's requirements and the sign-in challenge (routes of the gateway's own, /credit/session) */
  required?: (request: FastifyRequest, reply: FastifyReply, error: string) => FastifyReply
}

export interface PaymentGuardDeps {
  redis: Redis | undefined
  log: Logger
  chain: ChainContext
  blockedPayers: BlockedPayers
  charges: ChargePublisher
  /** prepaid credit: a request signed in with a wallet (or its session) pays from the wallet's credit */
  credit?: CreditGuard
}

/** The route that buys credit: x402-paid, its price the `amount` of its query. */
export const TOP_UP_PATH = '/credit/topup'
/** Paid routes whose credit payment is metered (a hold the service reports the use of), not the price. */
const meteredPaths = new Set(['POST /agent/prompt'])

/** runs of a payment id whose end onSend has recorded (a run that never gets there failed) */
const endedRuns = new WeakSet<FastifyRequest>()
/** the preHandler and onSend of a guard that verifies nothing */
const unpaid: Pick<PaymentGuard, 'preHandler' | 'onSend'> = {
  preHandler: (_request, _reply, done) => done(),
  onSend: (_request, _reply, payload, done) => done(null, payload),
}

/** what the 402s say about payment ids: optional, see the payment-identifier extension */
const paymentIdExtension = { [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) }

/** base64 JSON of an x402 settlement response, for X-PAYMENT-RESPONSE and PAYMENT-RESPONSE */
const encodeResponse = (value: Record<string, unknown>) => Buffer.from(JSON.stringify(value)).toString('base64')

/**
 * x402 `exact` on USDC for paid route groups: a verified payment's payer becomes the owner
 * id. Without PAY_TO paid routes answer 503; with SKIP_PAYMENT they pass unpaid (owner:
 * the header's unverified `from`, else a fixed development address).
 */
export function createPaymentGuard(
  settings: ServiceConfig<typeof gatewaySettings>,
  { redis, log, blockedPayers, charges, chain, credit }: PaymentGuardDeps,
): PaymentGuard {
  if (settings.SKIP_PAYMENT) {
    log.warn('SKIP_PAYMENT is on: paid routes accept requests WITHOUT payment. Development only.')
    return {
      onRequest: async (request) => {
        let owner = developmentOwner
        try {
          owner = getAddress(paymentFromHeaders(request.headers)?.authorization.from ?? developmentOwner)
        } catch {
          // an unreadable header still passes in development
        }
        request.identity = { ownerId: owner }
      },
      ...unpaid,
    }
  }
  if (!settings.PAY_TO) {
    log.warn('PAY_TO is not set: paid routes answer 503')
    return {
      onRequest: async () => {
        throw new Unavailable('payments are not configured on this gateway (PAY_TO is not set)')
      },
      ...unpaid,
    }
  }

  // nonces, payment ids and reservations must be shared by every gateway and outlive a restart:
  // per process, a payment could be replayed on another replica or after a restart
  if (!redis) {
    throw new StartupError(
      'paid routes need Redis: set REDIS_URL (used nonces, payment ids and reservations are shared there by every gateway), or SKIP_PAYMENT=true in development',
    )
  }
  const usdc = chain.tokens().find('USDC')
  if (!usdc) throw new StartupError(`the address book of chain ${chain.chainId} has no USDC`)
  const { name, version } = usdcDomain(chain.chainId, usdc.address)
  const terms: Omit<PaymentTerms, 'resource'> = {
    price: BigInt(settings.PAYMENT_PRICE),
    payTo: getAddress(settings.PAY_TO),
    asset: usdc.address,
    chainId: chain.chainId,
    description: paidRequestDescription,
    maxTimeoutSeconds: settings.PAYMENT_TIMEOUT_SECONDS,
    token: { name, version },
  }
  // a prompt's payment settles when its job completes: it must stay valid long enough for that
  const jobWindow = BigInt(settings.JOB_PAYMENT_MIN_VALIDITY_SECONDS ?? Math.floor(settings.PAYMENT_TIMEOUT_SECONDS / 2))
  // and every payment must outlive the answer long enough to be settled after it
  const windows = { JOB_PAYMENT_MIN_VALIDITY_SECONDS: jobWindow, PAYMENT_MIN_VALIDITY_SECONDS: settings.PAYMENT_MIN_VALIDITY_SECONDS }
  for (const [name, window] of Object.entries(windows)) {
    if (window >= settings.PAYMENT_TIMEOUT_SECONDS) {
      throw new StartupError(
        `${name} (${window}) must be below PAYMENT_TIMEOUT_SECONDS (${settings.PAYMENT_TIMEOUT_SECONDS}): clients sign validBefore = now + PAYMENT_TIMEOUT_SECONDS`,
      )
    }
  }
  const pathOf = (request: FastifyRequest) => request.url.split('?')[0]!
  const checkJobWindow = (request: FastifyRequest, payment: Payment) => {
    if (request.method !== 'POST' || pathOf(request) !== '/agent/prompt') return
    const now = BigInt(Math.floor(Date.now() / 1000))
    if (payment.authorization.validBefore < now + jobWindow) {
      throw new PaymentRefused(
        'expired',
        `expires too soon for a job: a prompt's payment settles only when its job completes, so validBefore must be at least ${jobWindow} s after now (${now}); sign validBefore = now + maxTimeoutSeconds (${settings.PAYMENT_TIMEOUT_SECONDS})`,
      )
    }
  }
  const payerChain = createPayerChain({ publicClient: chain.publicClient, asset: usdc.address })
  const reservations = createReservations({ redis, chain: payerChain, namespace: settings.NATS_NAMESPACE })
  const paymentIds = createPaymentIdStore({
    redis,
    reservations,
    namespace: settings.NATS_NAMESPACE,
    ttlMs: settings.PAYMENT_ID_TTL_SECONDS * 1000,
  })
  const verifier = createPaymentVerifier({
    requirements: terms,
    reservations,
    minValiditySeconds: settings.PAYMENT_MIN_VALIDITY_SECONDS,
    refusedPayer: blockedPayers.reasonFor,
  })
  log.info({ payTo: terms.payTo, asset: terms.asset, price: String(terms.price), chainId: terms.chainId }, 'x402 payments on')

  // the `network` of payment responses, as the client's x402 version names it
  const responseNetwork = { 1: v1Network(terms.chainId), 2: caip2Network(terms.chainId) }
  // never from the client's Host header: a client could make our 402 name any site. Without
  // PUBLIC_URL the gateway names itself by the port the request reached (right for local use)
  if (!settings.PUBLIC_URL) log.warn('PUBLIC_URL is not set: 402 answers name http://localhost:<port> as the resource')
  const originOf = (request: FastifyRequest) => settings.PUBLIC_URL ?? `http://localhost:${request.socket.localPort ?? settings.PORT}`
  const resourceOf = (request: FastifyRequest, route: string) => `${originOf(request)}${route}`
  // a payment is good for the resource and terms it was made for (the route's, or the MCP tool's that calls it)
  const checkBinding = createPaymentBinding({
    requirements: terms,
    publicUrl: settings.PUBLIC_URL,
    otherResources: paidToolResources(mcpTools({ price: settings.PAYMENT_PRICE })),
  })

  const minTopUp = BigInt(settings.CREDIT_MIN_TOPUP)
  const maxTopUp = BigInt(settings.CREDIT_MAX_TOPUP)
  if (maxTopUp < minTopUp) {
    throw new StartupError(`CREDIT_MAX_TOPUP (${maxTopUp}) must be at least CREDIT_MIN_TOPUP (${minTopUp})`)
  }
  /** the price of this request when the request sets it (a top-up's amount), else undefined */
  const requestPrice = (request: FastifyRequest): bigint | undefined => {
    if (pathOf(request) !== TOP_UP_PATH) return undefined
    const amount = (request.query as Record<string, unknown> | undefined)?.amount
    if (typeof amount !== 'string' || !/^[0-9]{1,15}$/.test(amount)) {
      throw new TopUpAmountInvalid(`amount must be a whole number of USDC base units, from ${minTopUp} to ${maxTopUp} (1000000 = 1 USDC)`)
    }
    const value = BigInt(amount)
    if (value < minTopUp || value > maxTopUp) {
      throw new TopUpAmountInvalid(
        `amount ${value} is outside the top-up range: from ${minTopUp} (CREDIT_MIN_TOPUP) to ${maxTopUp} (CREDIT_MAX_TOPUP)`,
      )
    }
    return value
  }
  /** a top-up's 402 with an amount out of range asks for the minimum */
  const topUpPrice = (request: FastifyRequest) => {
    try {
      return requestPrice(request) ?? minTopUp
    } catch {
      return minTopUp
    }
  }
  // what a 402 offers besides the payment: signing in to pay with credit, and when the credit is
  // short, a top-up of at least the shortfall
  const topUpOption = (request: FastifyRequest, short: CreditShort) => {
    const need = short.price - short.available
    const amount = need > minTopUp ? need : minTopUp
    return {
      url: `${originOf(request)}${TOP_UP_PATH}?amount=${amount}`,
      minimum: minTopUp.toString(),
      maximum: maxTopUp.toString(),
      available: short.available.toString(),
      price: short.price.toString(),
    }
  }
  const paymentRequired = (request: FastifyRequest, reply: FastifyReply, error: string, short?: CreditShort) => {
    const path = pathOf(request)
    const signIn = credit ? credit.signInExtension(request, path) : {}
    const extensions = { ...discoveryFor(request.method, path), ...paymentIdExtension, ...signIn }
    const price = path === TOP_UP_PATH ? topUpPrice(request) : terms.price
    const full = { ...terms, price, resource: resourceOf(request, path), extensions }
    const body = paymentRequiredBody(full, error)
    return reply
      .code(402)
      .header('payment-required', paymentRequiredHeader(full, error))
      .send(short ? { ...body, topUp: topUpOption(request, short) } : body)
  }
  /**
   * A request signed in with a wallet (SIGN-IN-WITH-X) or sent with its session token pays from
   * the wallet's credit: the route's price, or for metered routes a hold of CREDIT_METERED_HOLD
   * whose use the service reports. Credit does not buy credit: a top-up is paid with x402.
   */
  const payWithCredit = async (request: FastifyRequest, reply: FastifyReply, guard: CreditGuard) => {
    const path = pathOf(request)
    if (path === TOP_UP_PATH)
      return paymentRequired(request, reply, 'payment required: credit is bought with an x402 payment (PAYMENT-SIGNATURE), not with credit')
    const wallet = await guard.walletOf(request, reply)
    if (!wallet) return paymentRequired(request, reply, 'payment required')
    const metered = meteredPaths.has(`${request.method} ${path}`)
    const amount = metered ? BigInt(settings.CREDIT_METERED_HOLD) : terms.price
    const short = await guard.pay(request, reply, { wallet, amount, metered, route: `${request.method} ${path}` })
    if (!short) return
    const refusal = new InsufficientCredit(
      wallet,
      short.available.toString(),
      metered ? 'request holds' : 'request costs',
      amount.toString(),
    )
    return paymentRequired(request, reply, `${refusal.message}, or pay this request with x402`, short)
  }

  // the payment of POST /agent/prompt buys its job: settled only if the job completes (the agent
  // names the job in its answer's header and reports the outcome); other routes settle at once
  const jobOf = (request: FastifyRequest, reply: FastifyReply, paid: NonNullable<FastifyRequest['payment']>) => {
    if (request.method !== 'POST' || paid.route !== '/agent/prompt') return {}
    const jobId = reply.getHeader(jobIdHeader)
    return typeof jobId === 'string' && jobId !== '' ? { jobId, settle: settleOnJobComplete } : {}
  }

  const charged = (request: FastifyRequest, reply: FastifyReply, paid: NonNullable<FastifyRequest['payment']>): PaymentCharged => {
    return {
      payer: paid.payer,
      payTo: terms.payTo,
      asset: terms.asset,
      chainId: terms.chainId,
      network: paid.payment.network,
      x402Version: paid.payment.x402Version,
      authorization: authorizationJson(paid.payment.authorization),
      signature: paid.payment.signature,
      method: request.method,
      route: paid.route,
      resource: paid.resource,
      requestId: request.id,
      chargedAt: Date.now(),
      ...jobOf(request, reply, paid),
    }
  }

  const refused = (request: FastifyRequest, reply: FastifyReply, error: unknown) => {
    if (error instanceof PaymentRefused) {
      // counted against its payer, else the client address (countFailedPayments)
      request.paymentRefusal = error
      return paymentRequired(request, reply, error.message)
    }
    request.log.error({ err: error }, 'payment verification failed')
    throw new Unavailable('payment verification is unavailable, try again shortly')
  }

  // How a run of a payment id ended, for its repeats. Not recorded (Redis down), its repeats are
  // told it is in progress until the id expires: never answered without the charge.
  const recordEnd = async (request: FastifyRequest, paid: NonNullable<FastifyRequest['payment']>, outcome: RunOutcome) => {
    endedRuns.add(request)
    try {
      await paymentIds.ended(paid.payer, paid.payment.paymentId!, paid.payment.authorization.nonce, outcome)
    } catch (error) {
      request.log.warn({ err: error }, 'the answer of a payment id was not recorded; its repeats are refused until it expires')
    }
  }

  return {
    required: (request, reply, error) => paymentRequired(request, reply, error),
    async onRequest(request, reply) {
      let payer: Address
      let payment: Payment | undefined
      // what could not be recorded is not served: nothing is verified or claimed, nothing charged
      if (!charges.accepting()) {
        request.log.error({ unsent: charges.unsentCount() }, 'paid request refused: too many payment events wait to be published')
        throw new Unavailable('payments cannot be recorded right now (the payment event stream is unavailable); try again shortly')
      }
      if (credit && creditCredentials(request)) return payWithCredit(request, reply, credit)
      const price = requestPrice(request)
      try {
        payment = paymentFromHeaders(request.headers)
        if (!payment) return paymentRequired(request, reply, 'payment required: send X-PAYMENT (x402 v1) or PAYMENT-SIGNATURE (v2)')
        checkJobWindow(request, payment)
        checkBinding(payment, { method: request.method, path: pathOf(request), resource: resourceOf(request, pathOf(request)), price })
        // with a payment id, the nonce is claimed (or not: a repeat) once the body is known
        payer =
          payment.paymentId === undefined
            ? await verifier.verify(payment, Date.now() / 1000, price)
            : verifier.check(payment, Date.now() / 1000, price)
      } catch (error) {
        return refused(request, reply, error)
      }
      const route = pathOf(request)
      request.identity = { ownerId: payer }
      request.payment = { payment, payer, route, resource: resourceOf(request, route) }
    },

    // A payment id names a request and its payment: its first use claims the payment's nonce and
    // runs; the same request with the same payment again gets the first answer, never a new run
    // (unless that answer was an error, not charged: then one repeat runs it again); another
    // request, or another payment, under the id is refused. The service gets the id as an
    // idempotency key.
    async preHandler(request, reply) {
      const paid = request.payment
      const id = paid?.payment.paymentId
      if (!paid || id === undefined) return
      // refused or answered here, the request never reaches the service: not charged again
      request.payment = null
      const fingerprint = requestFingerprint(
        request.method,
        request.url,
        request.headers['content-type'],
        request.bodyBytes ?? Buffer.alloc(0),
      )
      const { nonce } = paid.payment.authorization
      let claim: PaymentIdClaim
      let turn: RepeatTurn | undefined
      try {
        claim = await paymentIds.claim(paid.payer, id, fingerprint, paid.payment)
        if (claim.kind === 'repeat') turn = await paymentIds.turn(paid.payer, id, nonce)
      } catch (error) {
        return refused(request, reply, error)
      }
      if (claim.kind === 'conflict') throw new PaymentIdReused(id)
      if (claim.kind === 'other_payment') throw new PaymentIdOtherPayment(id, claim.nonce)
      if (claim.kind === 'nonce_used') return refused(request, reply, nonceUsed(paid.payment, paid.payer))
      if (turn?.kind === 'answer') return replay(reply, turn.answer)
      if (turn?.kind === 'not_stored') throw new PaymentIdNotStored(id, turn.reason)
      if (turn?.kind === 'in_progress') {
        reply.header('retry-after', '2')
        throw new PaymentIdInProgress(id)
      }
      // the first run, or a run again after an error answer
      request.payment = paid
      request.identity = { ...request.identity, idempotencyKey: `${paid.payer.toLowerCase()}:${id}:${nonce}` }
      // a client gone before the answer: the run ends unanswered, and a repeat may run it again
      reply.raw.once('close', () => {
        if (!endedRuns.has(request)) void recordEnd(request, paid, { kind: 'failed' })
      })
    },

    // Charged only when the service answered below 400, as the x402 reference middleware
    // does; the nonce stays used either way and the answer says which happened. A payment id's
    // answer is read whole first (when it can be kept) and recorded for its repeats.
    async onSend(request, reply, payload) {
      if (request.credit && credit) return credit.answered(request, reply, payload)
      const paid = request.payment
      if (!paid) return payload
      const id = paid.payment.paymentId
      let read: ReadAnswer | undefined
      if (id !== undefined && reply.statusCode < 400) {
        read = await readAnswer(reply, payload, settings.PAYMENT_ID_ANSWER_MAX_BYTES)
        if (read.kind === 'broken') {
          reply.code(502).type('application/json').removeHeader('content-length').removeHeader('content-encoding')
          payload = JSON.stringify({ error: 'the service broke off its answer; send the request again' })
        }
      }
      const network = responseNetwork[paid.payment.x402Version]
      let response: Record<string, unknown>
      if (reply.statusCode < 400) {
        await charges.charge(charged(request, reply, paid))
        // settlement is asynchronous: the transaction is in GET /admin/revenue once settled
        response = { success: true, transaction: '', network, payer: paid.payer }
      } else {
        // never settled, so it reserves nothing (a payment id's may still be charged by a repeat)
        if (id === undefined) await reservations.release(paid.payer, paid.payment.authorization.nonce, request.log)
        const retry =
          id === undefined ? "this payment's nonce is used, sign a new one to retry" : 'send it again with the same payment id to retry'
        const errorReason = `not charged: the service answered ${reply.statusCode}; ${retry}`
        response = { success: false, errorReason, transaction: '', network, payer: paid.payer }
      }
      const header = encodeResponse(response)
      reply.header('x-payment-response', header).header('payment-response', header)
      if (id === undefined) return payload
      if (read?.kind === 'body') {
        await recordEnd(request, paid, { kind: 'answered', answer: answerOf(reply, read.body) })
        return read.body
      }
      if (read?.kind === 'not_stored') {
        await recordEnd(request, paid, { kind: 'not_stored', reason: read.reason })
        return read.payload
      }
      await recordEnd(request, paid, { kind: 'failed' })
      return payload
    },
  }
}
