import { usdcDomain } from '@ats/chain'
import {
  caip2Network,
  paidRequestDescription,
  paymentRequiredBody,
  paymentRequiredHeader,
  v1Network,
  type PaymentCharged,
  type PaymentTerms,
} from '@ats/contracts'
import { StartupError, Unavailable, type ChainContext, type Logger, type ServiceConfig } from '@ats/service-kit'
import type { FastifyReply, FastifyRequest, onRequestHookHandler, onSendHookHandler } from 'fastify'
import type { Redis } from 'ioredis'
import { getAddress, type Address } from 'viem'
import { createBalanceChecker } from './balances.ts'
import { discoveryFor } from './discovery.ts'
import { PaymentError } from './errors.ts'
import { paymentFromHeaders, type Payment } from './header.ts'
import { createNonceStore } from './nonces.ts'
import { createPaymentVerifier } from './verifier.ts'
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
  'PAY_TO' | 'PAYMENT_PRICE' | 'PAYMENT_TIMEOUT_SECONDS' | 'SKIP_PAYMENT' | 'PUBLIC_URL' | 'PORT'
>

/** The owner of paid requests when SKIP_PAYMENT is on and no payment header names one. */
export const developmentOwner: Address = '0x000000000000000000000000000000000000dEaD'

/** The hooks of paid route groups: verify before the proxy, charge after the service answered. */
export interface PaymentGuard {
  onRequest: onRequestHookHandler
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

/** base64 JSON of an x402 settlement response, for X-PAYMENT-RESPONSE and PAYMENT-RESPONSE */
const encodeResponse = (value: Record<string, unknown>) => Buffer.from(JSON.stringify(value)).toString('base64')

/**
 * x402 `exact` on USDC for paid route groups: a verified payment's payer becomes the owner
 * id. Without PAY_TO paid routes answer 503; with SKIP_PAYMENT they pass unpaid (owner:
 * the header's unverified `from`, else a fixed development address).
 */
export function createPaymentGuard(settings: PaymentSettings, { redis, log, blockedPayers, charges, chain }: PaymentGuardDeps): PaymentGuard {
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
      onSend: passThrough,
    }
  }
  if (!settings.PAY_TO) {
    log.warn('PAY_TO is not set: paid routes answer 503')
    return {
      onRequest: async () => {
        throw new Unavailable('payments are not configured on this gateway (PAY_TO is not set)')
      },
      onSend: passThrough,
    }
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
  const verifier = createPaymentVerifier({
    requirements: terms,
    nonces: createNonceStore(redis ? { redis } : {}),
    balances: createBalanceChecker({ publicClient: chain.publicClient, asset: usdc.address }),
    refusedPayer: blockedPayers.reasonFor,
  })
  log.info({ payTo: terms.payTo, asset: terms.asset, price: String(terms.price), chainId: terms.chainId }, 'x402 payments on')

  // the `network` of payment responses, as the client's x402 version names it
  const responseNetwork = { 1: v1Network(terms.chainId), 2: caip2Network(terms.chainId) }
  const pathOf = (request: FastifyRequest) => request.url.split('?')[0]!
  // never from the client's Host header: a client could make our 402 name any site. Without
  // PUBLIC_URL the gateway names itself by the port the request reached (right for local use)
  if (!settings.PUBLIC_URL) log.warn('PUBLIC_URL is not set: 402 answers name http://localhost:<port> as the resource')
  const resourceOf = (request: FastifyRequest, route: string) =>
    `${settings.PUBLIC_URL ?? `http://localhost:${request.socket.localPort ?? settings.PORT}`}${route}`

  const paymentRequired = (request: FastifyRequest, reply: FastifyReply, error: string) => {
    const path = pathOf(request)
    const extensions = discoveryFor(request.method, path)
    const full = { ...terms, resource: resourceOf(request, path), ...(extensions ? { extensions } : {}) }
    return reply.code(402).header('payment-required', paymentRequiredHeader(full, error)).send(paymentRequiredBody(full, error))
  }

  const charged = (request: FastifyRequest, paid: NonNullable<FastifyRequest['payment']>): PaymentCharged => {
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
    }
  }

  return {
    async onRequest(request, reply) {
      let payer: Address
      let payment: Payment | undefined
      try {
        payment = paymentFromHeaders(request.headers)
        if (!payment) return paymentRequired(request, reply, 'payment required: send X-PAYMENT (x402 v1) or PAYMENT-SIGNATURE (v2)')
        payer = await verifier.verify(payment, Date.now() / 1000)
      } catch (error) {
        if (error instanceof PaymentError) return paymentRequired(request, reply, error.message)
        request.log.error({ err: error }, 'payment verification failed')
        throw new Unavailable('payment verification is unavailable, try again shortly')
      }
      const route = pathOf(request)
      request.identity = { ownerId: payer }
      request.payment = { payment, payer, route, resource: resourceOf(request, route) }
    },

    // Charged only when the service answered below 400, as the x402 reference middleware
    // does; the nonce stays used either way and the answer says which happened.
    async onSend(request, reply, payload) {
      const paid = request.payment
      if (!paid) return payload
      const network = responseNetwork[paid.payment.x402Version]
      let response: Record<string, unknown>
      if (reply.statusCode < 400) {
        await charges.charge(charged(request, paid))
        // settlement is asynchronous: the transaction is in GET /admin/revenue once settled
        response = { success: true, transaction: '', network, payer: paid.payer }
      } else {
        const errorReason = `not charged: the service answered ${reply.statusCode}; this payment's nonce is used, sign a new one to retry`
        response = { success: false, errorReason, transaction: '', network, payer: paid.payer }
      }
      const header = encodeResponse(response)
      reply.header('x-payment-response', header).header('payment-response', header)
      return payload
    },
  }
}
