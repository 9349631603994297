import { randomBytes } from 'node:crypto'
import { transferWithAuthorizationTypes, usdcDomain } from '@ats/chain'
import { paymentRequirementsV2, type PaymentTerms } from '@ats/contracts'
import { Redis } from 'ioredis'
import { toHex, type Address, type Hex } from 'viem'
import type { PrivateKeyAccount } from 'viem/accounts'
import { decodeXPayment, type Payment } from '../src/payments/index.ts'

export interface Message {
  from: Address
  to: Address
  value: bigint
  validAfter: bigint
  validBefore: bigint
  nonce: Hex
}

export const nowS = () => Math.floor(Date.now() / 1000)
export const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64')

/** Terms of a paid route and payments signed for them, as a client would send them: no chain needed. */
export function paymentFixtures({
  usdc,
  payTo,
  chainId,
  payer,
}: {
  usdc: Address
  payTo: Address
  chainId: number
  payer: PrivateKeyAccount
}) {
  const terms: PaymentTerms = {
    price: 10_000n,
    payTo,
    asset: usdc,
    chainId,
    resource: 'http://localhost:3000/agent/prompt',
    description: 'one agent prompt',
    maxTimeoutSeconds: 60,
    token: { name: 'USD Coin', version: '2' },
  }
  const domain = usdcDomain(chainId, usdc)
  const messageFor = (signer: PrivateKeyAccount, over: Partial<Message> = {}): Message => ({
    from: signer.address,
    to: payTo,
    value: 10_000n,
    validAfter: BigInt(nowS() - 600),
    validBefore: BigInt(nowS() + 600),
    nonce: toHex(randomBytes(32)),
    ...over,
  })
  const sign = (signer: PrivateKeyAccount, message: Message) =>
    signer.signTypedData({ domain, types: transferWithAuthorizationTypes, primaryType: 'TransferWithAuthorization', message })
  const wire = (message: Message, signature: Hex) => ({
    signature,
    authorization: {
      ...message,
      value: message.value.toString(),
      validAfter: message.validAfter.toString(),
      validBefore: message.validBefore.toString(),
    },
  })
  const xPayment = (message: Message, signature: Hex, network = 'anvil') =>
    b64({ x402Version: 1, scheme: 'exact', network, payload: wire(message, signature) })
  const paymentSignature = (message: Message, signature: Hex, accepted = paymentRequirementsV2(terms)) =>
    b64({
      x402Version: 2,
      resource: { url: terms.resource, description: terms.description, mimeType: 'application/json' },
      accepted,
      payload: wire(message, signature),
    })
  async function signed(signer = payer, over: Partial<Message> = {}) {
    const message = messageFor(signer, over)
    return { message, signature: await sign(signer, message) }
  }
  const v1 = async (signer = payer, over: Partial<Message> = {}, network?: string): Promise<Payment> => {
    const { message, signature } = await signed(signer, over)
    return decodeXPayment(xPayment(message, signature, network))
  }
  return { terms, domain, messageFor, sign, wire, xPayment, paymentSignature, signed, v1 }
}

/** Two clients of the test Redis, as two gateway replicas have; disconnected when the test ends. */
export function redisPair(
  t: { teardown(fn: () => void): void },
  redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
): [Redis, Redis] {
  const pair: [Redis, Redis] = [new Redis(redisUrl, { maxRetriesPerRequest: 1 }), new Redis(redisUrl, { maxRetriesPerRequest: 1 })]
  t.teardown(() => {
    for (const redis of pair) redis.disconnect()
  })
  return pair
}

/**
 * A client of a Redis that is not there (port 1): every command fails at once, nothing queued or
 * retried, as the stores see Redis down. Disconnected when the test ends.
 */
export function deadRedis(t: { teardown(fn: () => void): void }): Redis {
  const dead = new Redis('redis://127.0.0.1:1', {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  })
  t.teardown(() => dead.disconnect())
  return dead
}
