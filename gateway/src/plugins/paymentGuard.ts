import { addressBookFor, createChainClients, createTokenRegistry } from '@ats/chain'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import type { Redis } from 'ioredis'
import { getAddress, type Address } from 'viem'
import {
  createBalanceChecker,
  createNonceStore,
  createPaymentVerifier,
  paymentFromHeaders,
  paymentRequiredBody,
  paymentRequiredHeader,
  PaymentError,
  type PaymentTerms,
} from '../payments/index.ts'
import { Unavailable } from '@ats/service-kit'

export interface PaymentSettings {
  PAY_TO?: string
  PAYMENT_PRICE: number
  PAYMENT_TIMEOUT_SECONDS: number
  SKIP_PAYMENT: boolean
  RPC_URL: string
  ADDRESS_BOOK?: string
  PUBLIC_URL?: string
  CHAIN_ID: number
}

/** The owner of paid requests when SKIP_PAYMENT is on and no payment header names one. */
export const developmentOwner: Address = '0x000000000000000000000000000000000000dEaD'

export type PaymentGuard = (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>

/**
 * The onRequest guard of paid route groups (x402 `exact` on USDC): a verified payment's
 * payer becomes the owner id. Without PAY_TO paid routes answer 503; with SKIP_PAYMENT
 * they pass (owner: the header's unverified `from`, else a fixed development address).
 */
export function createPaymentGuard(settings: PaymentSettings, redis: Redis | undefined, log: FastifyBaseLogger): PaymentGuard {
  if (settings.SKIP_PAYMENT) {
    log.warn('SKIP_PAYMENT is on: paid routes accept requests WITHOUT payment. Development only.')
    return async (request) => {
      let owner = developmentOwner
      try {
        owner = getAddress(paymentFromHeaders(request.headers)?.authorization.from ?? developmentOwner)
      } catch {
        // an unreadable header still passes in development
      }
      request.identity = { ownerId: owner }
    }
  }
  if (!settings.PAY_TO) {
    log.warn('PAY_TO is not set: paid routes answer 503')
    return async () => {
      throw new Unavailable('payments are not configured on this gateway (PAY_TO is not set)')
    }
  }

  const book = addressBookFor({ chainId: settings.CHAIN_ID, ...(settings.ADDRESS_BOOK ? { addressBookPath: settings.ADDRESS_BOOK } : {}) })
  const usdc = createTokenRegistry(book.tokens).find('USDC')
  if (!usdc) throw new Error(`the address book of chain ${settings.CHAIN_ID} has no USDC`)
  const { publicClient } = createChainClients({ rpcUrl: settings.RPC_URL, chainId: settings.CHAIN_ID })
  const terms: Omit<PaymentTerms, 'resource'> = {
    price: BigInt(settings.PAYMENT_PRICE),
    payTo: getAddress(settings.PAY_TO),
    asset: usdc.address,
    chainId: settings.CHAIN_ID,
    description: 'Agent Trading Service: one agent request',
    maxTimeoutSeconds: settings.PAYMENT_TIMEOUT_SECONDS,
    token: { name: 'USD Coin', version: '2' },
  }
  const verifier = createPaymentVerifier({
    requirements: terms,
    nonces: createNonceStore(redis ? { redis } : {}),
    balances: createBalanceChecker({ publicClient, asset: usdc.address }),
  })
  log.info({ payTo: terms.payTo, asset: terms.asset, price: String(terms.price), chainId: terms.chainId }, 'x402 payments on')

  const paymentRequired = (request: FastifyRequest, reply: FastifyReply, error: string) => {
    const base = settings.PUBLIC_URL ?? `${request.protocol}://${request.host}`
    const full = { ...terms, resource: `${base}${request.url.split('?')[0]}` }
    return reply.code(402).header('payment-required', paymentRequiredHeader(full, error)).send(paymentRequiredBody(full, error))
  }

  return async (request, reply) => {
    let payer: Address
    try {
      const payment = paymentFromHeaders(request.headers)
      if (!payment) return paymentRequired(request, reply, 'payment required: send X-PAYMENT (x402 v1) or PAYMENT-SIGNATURE (v2)')
      payer = await verifier.verify(payment, Date.now() / 1000)
    } catch (error) {
      if (error instanceof PaymentError) return paymentRequired(request, reply, error.message)
      request.log.error({ err: error }, 'payment verification failed')
      throw new Unavailable('payment verification is unavailable, try again shortly')
    }
    request.identity = { ownerId: payer }
  }
}
