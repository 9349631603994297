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
import { PaymentIdReused, PaymentRefused } from '../errors.ts'
import { paymentFromHeaders, type Payment } from './header.ts'
import { createNonceStore } from './nonces.ts'
import { createPaymentIdStore, requestFingerprint, type PaymentIdClaim } from './paymentIds.ts'
import { createPaymentVerifier, nonceUsed } from './verifier.ts'
import type { BlockedPayers } from './blockedPayers.ts'
import type { ChargePublisher } from './chargePublisher.ts'
import type { gatewaySettings } from '../settings.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** the verified payment of a paid request, charged when the service answers below 400 */
    payment: { payment: Payment; payer: Address; route: string; resource: string } | null
  }
}

export type PaymentSettings = Pick<
  ServiceConfig<typeof gatewaySettings>,
  | 'PAY_TO'
  | 'PAYMENT_PRICE'
  | 'PAYMENT_TIMEOUT_SECONDS'
  | 'JOB_PAYMENT_MIN_VALIDITY_SECONDS'
  | 'PAYMENT_MIN_VALIDITY_SECONDS'
  | 'SKIP_PAYMENT'
  | 'PUBLIC_URL'
  | 'PORT'
  | 'PAYMENT_ID_TTL_SECONDS'
  | 'NATS_NAMESPACE'
>

/** The owner of paid requests when SKIP_PAYMENT is on and no payment header names one. */
export const developmentOwner: Address = '0x000000000000000000000000000000000000dEaD'

/** The hooks of paid route groups: verify before the proxy, charge after the service answered. */
export interface PaymentGuard {
  onRequest: onRequestHookHandler
  /** a payment with a payment id: decided once the body is there (first, repeat or 409) */
  preHandler: preHandlerHookHandler
  onSend: onSendHookHandler
}

export interface PaymentGuardDeps {
  redis: Redis | undefined
  log: Logger
  chain: ChainContext
  blockedPayers: BlockedPayers
  charges: ChargePublisher
}

const passThrough: onSendHookHandler = (_request, _reply, payload, done) => done(null, payload)
const noPaymentId: preHandlerHookHandler = (_request, _reply, done) => done()

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
  settings: PaymentSettings,
  { redis, log, blockedPayers, charges, chain }: PaymentGuardDeps,
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
      preHandler: noPaymentId,
      onSend: passThrough,
    }
  }
  if (!settings.PAY_TO) {
    log.warn('PAY_TO is not set: paid routes answer 503')
    return {
      onRequest: async () => {
        throw new Unavailable('payments are not configured on this gateway (PAY_TO is not set)')
      },
      preHandler: noPaymentId,
      onSend: passThrough,
    }
  }

  // nonces, payment ids and reservations must be shared by every gateway and outlive a restart:
  // per process, a payment could be replayed on another replica or after a restart (issue 23)
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
  if (jobWindow >= BigInt(settings.PAYMENT_TIMEOUT_SECONDS)) {
    throw new StartupError(
      `JOB_PAYMENT_MIN_VALIDITY_SECONDS (${jobWindow}) must be below PAYMENT_TIMEOUT_SECONDS (${settings.PAYMENT_TIMEOUT_SECONDS}): clients sign validBefore = now + PAYMENT_TIMEOUT_SECONDS`,
    )
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
  // every payment must outlive the answer long enough to be settled after it
  if (settings.PAYMENT_MIN_VALIDITY_SECONDS >= settings.PAYMENT_TIMEOUT_SECONDS) {
    throw new StartupError(
      `PAYMENT_MIN_VALIDITY_SECONDS (${settings.PAYMENT_MIN_VALIDITY_SECONDS}) must be below PAYMENT_TIMEOUT_SECONDS (${settings.PAYMENT_TIMEOUT_SECONDS}): clients sign validBefore = now + PAYMENT_TIMEOUT_SECONDS`,
    )
  }
  const nonces = createNonceStore({ redis })
  const payerChain = createPayerChain({ publicClient: chain.publicClient, asset: usdc.address })
  const reservations = createReservations({ redis, chain: payerChain, namespace: settings.NATS_NAMESPACE })
  const paymentIds = createPaymentIdStore({
    redis,
    nonces,
    reservations,
    namespace: settings.NATS_NAMESPACE,
    ttlMs: settings.PAYMENT_ID_TTL_SECONDS * 1000,
  })
  const verifier = createPaymentVerifier({
    requirements: terms,
    nonces,
    // one cache of balances: the payment-id path checks the balance alone before its claim
    balances: { balanceOf: async (payer) => (await payerChain.balanceOf(payer)).balance },
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
  const resourceOf = (request: FastifyRequest, route: string) =>
    `${settings.PUBLIC_URL ?? `http://localhost:${request.socket.localPort ?? settings.PORT}`}${route}`

  const paymentRequired = (request: FastifyRequest, reply: FastifyReply, error: string) => {
    const path = pathOf(request)
    const extensions = { ...discoveryFor(request.method, path), ...paymentIdExtension }
    const full = { ...terms, resource: resourceOf(request, path), extensions }
    return reply.code(402).header('payment-required', paymentRequiredHeader(full, error)).send(paymentRequiredBody(full, error))
  }

  // the payment of POST /agent/prompt buys its job: settled only if the job completes (the agent
  // names the job in its answer's header and reports the outcome); other routes settle at once
  const jobOf = (request: FastifyRequest, reply: FastifyReply, paid: NonNullable<FastifyRequest['payment']>) => {
    if (request.method !== 'POST' || paid.route !== '/agent/prompt') return {}
    const jobId = reply.getHeader(jobIdHeader)
    return typeof jobId === 'string' && jobId !== '' ? { jobId, settle: settleOnJobComplete } : {}
  }

  const charged = (request: FastifyRequest, reply: FastifyReply, paid: NonNullable<FastifyRequest['payment']>): PaymentCharged => {
    const a = paid.payment.authorization
    return {
      payer: paid.payer,
      payTo: terms.payTo,
      asset: terms.asset,
      chainId: terms.chainId,
      network: paid.payment.network,
      x402Version: paid.payment.x402Version,
      authorization: {
        from: a.from,
        to: a.to,
        value: a.value.toString(),
        validAfter: a.validAfter.toString(),
        validBefore: a.validBefore.toString(),
        nonce: a.nonce,
      },
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
    if (error instanceof PaymentRefused) return paymentRequired(request, reply, error.message)
    request.log.error({ err: error }, 'payment verification failed')
    throw new Unavailable('payment verification is unavailable, try again shortly')
  }

  // One charge per payment id: the first answer below 400 charges the id's first payment (a
  // repeat may be it when the first answer was an error). If Redis fails here, charge: the
  // ledger records a payment once per (payer, nonce), and every charge of an id names one nonce.
  const chargesNow = async (request: FastifyRequest, paid: NonNullable<FastifyRequest['payment']>) => {
    if (paid.payment.paymentId === undefined) return true
    try {
      return await paymentIds.charge(paid.payer, paid.payment.paymentId)
    } catch (error) {
      request.log.warn({ err: error }, 'payment id charge not recorded; charging (the ledger keeps one per nonce)')
      return true
    }
  }

  return {
    async onRequest(request, reply) {
      let payer: Address
      let payment: Payment | undefined
      // what could not be recorded is not served: nothing is verified or claimed, nothing charged
      if (!charges.accepting()) {
        request.log.error({ unsent: charges.unsentCount() }, 'paid request refused: too many payment events wait to be published')
        throw new Unavailable('payments cannot be recorded right now (the payment event stream is unavailable); try again shortly')
      }
      try {
        payment = paymentFromHeaders(request.headers)
        if (!payment) return paymentRequired(request, reply, 'payment required: send X-PAYMENT (x402 v1) or PAYMENT-SIGNATURE (v2)')
        checkJobWindow(request, payment)
        // with a payment id, the nonce is claimed (or not: a repeat) once the body is known
        payer =
          payment.paymentId === undefined ? await verifier.verify(payment, Date.now() / 1000) : verifier.check(payment, Date.now() / 1000)
      } catch (error) {
        return refused(request, reply, error)
      }
      const route = pathOf(request)
      request.identity = { ownerId: payer }
      request.payment = { payment, payer, route, resource: resourceOf(request, route) }
    },

    // A payment id names a request: its first use claims the payment's nonce, the same request
    // again is answered paid by that first payment (no new nonce claimed, the same job), another
    // request with the id is refused. The service gets the id as an idempotency key.
    async preHandler(request, reply) {
      const paid = request.payment
      const id = paid?.payment.paymentId
      if (!paid || id === undefined) return
      // refused here, the request never reaches the service: no payment response, as in onRequest
      request.payment = null
      const fingerprint = requestFingerprint(
        request.method,
        request.url,
        request.headers['content-type'],
        request.bodyBytes ?? Buffer.alloc(0),
      )
      let claim: PaymentIdClaim
      try {
        await verifier.funded(paid.payment, paid.payer)
        claim = await paymentIds.claim(paid.payer, id, fingerprint, paid.payment)
      } catch (error) {
        return refused(request, reply, error)
      }
      if (claim.kind === 'conflict') throw new PaymentIdReused(id)
      if (claim.kind === 'nonce_used') return paymentRequired(request, reply, nonceUsed(paid.payment, paid.payer).message)
      if (claim.kind === 'repeat') paid.payment = claim.first
      request.payment = paid
      const { nonce } = paid.payment.authorization
      request.identity = { ...request.identity, idempotencyKey: `${paid.payer.toLowerCase()}:${id}:${nonce}` }
    },

    // Charged only when the service answered below 400, as the x402 reference middleware
    // does; the nonce stays used either way and the answer says which happened.
    async onSend(request, reply, payload) {
      const paid = request.payment
      if (!paid) return payload
      const network = responseNetwork[paid.payment.x402Version]
      let response: Record<string, unknown>
      if (reply.statusCode < 400) {
        if (await chargesNow(request, paid)) await charges.charge(charged(request, reply, paid))
        // settlement is asynchronous: the transaction is in GET /admin/revenue once settled
        response = { success: true, transaction: '', network, payer: paid.payer }
      } else {
        // never settled, so it reserves nothing (a payment id's may still be charged by a repeat)
        if (paid.payment.paymentId === undefined) await reservations.release(paid.payer, paid.payment.authorization.nonce, request.log)
        const retry =
          paid.payment.paymentId === undefined
            ? "this payment's nonce is used, sign a new one to retry"
            : 'send it again with the same payment id to retry'
        const errorReason = `not charged: the service answered ${reply.statusCode}; ${retry}`
        response = { success: false, errorReason, transaction: '', network, payer: paid.payer }
      }
      const header = encodeResponse(response)
      reply.header('x-payment-response', header).header('payment-response', header)
      return payload
    },
  }
}
