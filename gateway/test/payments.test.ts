// x402 payments: the headers (decoding, digests, the 402's shapes) without a chain, then the
// verifier on a devnet and the test Redis.
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import { createChainClients, transferWithAuthorizationTypes } from '@ats/chain'
import { startDevnet } from '@ats/devnet'
import { freshNamespace } from '@ats/service-kit/testing'
import { hashTypedData, recoverTypedDataAddress, toHex, type Address, type Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import {
  createPayerChain,
  createPaymentVerifier,
  createReservations,
  decodePaymentSignature,
  decodeXPayment,
  MalformedPaymentError,
  nonceKeyOf,
  PaymentRefused,
  paymentFromHeaders,
  RESERVATION_KEY_PREFIX,
  type Payment,
} from '../src/payments/index.ts'
import { createAuthorizationSigning } from '../src/payments/signature.ts'
import { paymentRequiredBody, paymentRequiredHeader, paymentRequirementsV2 } from '@ats/contracts'
import { b64, deadRedis, nowS, paymentFixtures, redisPair } from './paymentFixtures.ts'

t.test('x402 headers without a chain: decoding, digests and the 402 shapes', async (t) => {
  // pure: decoding, digests and the 402 shapes need no chain (anvil's account 1 signs, the devnet's addresses)
  const payer = privateKeyToAccount('0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d')
  const usdc: Address = '0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512'
  const payTo: Address = '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC'
  const { terms, domain, wire, xPayment, paymentSignature, signed } = paymentFixtures({ usdc, payTo, chainId: 31337, payer })
  const signing = createAuthorizationSigning({ ...terms.token, chainId: terms.chainId, verifyingContract: usdc })

  t.test('the digest and signer match viem', async (t) => {
    const { message, signature } = await signed()
    const payment = decodeXPayment(xPayment(message, signature))
    const digest = signing.digest(payment.authorization)
    t.equal(
      toHex(digest),
      hashTypedData({ domain, types: transferWithAuthorizationTypes, primaryType: 'TransferWithAuthorization', message }),
    )
    const viemSigner = await recoverTypedDataAddress({
      domain,
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message,
      signature,
    })
    t.equal(signing.recover(payment.authorization, payment.signature), viemSigner.toLowerCase())
    t.equal(viemSigner, payer.address)
  })

  t.test('headers decode; every malformation has its own message', async (t) => {
    const { message, signature } = await signed()
    const fromV1 = decodeXPayment(xPayment(message, signature))
    const fromV2 = decodePaymentSignature(paymentSignature(message, signature))
    t.same(fromV1, {
      x402Version: 1,
      scheme: 'exact',
      network: 'anvil',
      signature,
      authorization: { ...message, from: message.from.toLowerCase(), to: message.to.toLowerCase() },
    })
    const { resource, accepted, ...v2Payment } = fromV2
    t.same({ ...v2Payment, x402Version: 1, network: 'anvil', asset: undefined }, { ...fromV1, asset: undefined })
    t.equal(fromV2.network, 'eip155:31337')
    t.equal(fromV2.asset, usdc.toLowerCase())
    t.equal(resource, terms.resource, 'v2 says what it paid for: the resource and the requirements it accepted')
    t.same(accepted, paymentRequirementsV2(terms))
    t.equal(
      decodePaymentSignature(
        b64({ ...JSON.parse(Buffer.from(paymentSignature(message, signature), 'base64').toString()), resource: undefined }),
      ).resource,
      undefined,
      'a payment that says no resource',
    )
    t.same(paymentFromHeaders({ 'x-payment': xPayment(message, signature) }), fromV1)
    t.same(paymentFromHeaders({ 'payment-signature': paymentSignature(message, signature), 'x-payment': 'junk' }), fromV2)
    t.equal(paymentFromHeaders({}), undefined)
    const hexValues = decodeXPayment(
      b64({
        x402Version: 1,
        scheme: 'exact',
        network: 'anvil',
        payload: { signature, authorization: { ...wire(message, signature).authorization, value: '0x2710' } },
      }),
    )
    t.equal(hexValues.authorization.value, 10_000n, 'uint256 fields may be 0x-hex')

    const bad = (raw: string, error: RegExp, decode = decodeXPayment) => {
      t.throws(() => decode(raw), error, error.source)
      try {
        decode(raw)
      } catch (e) {
        t.type(e, PaymentRefused)
      }
    }
    const v1Of = (payload: unknown, top: object = {}) => b64({ x402Version: 1, scheme: 'exact', network: 'anvil', payload, ...top })
    const auth = wire(message, signature).authorization
    bad('%%% not base64 %%%', /^X-PAYMENT: not base64$/)
    bad('', /^X-PAYMENT: header is empty$/)
    bad(Buffer.from('{"x402Version":1,').toString('base64'), /^X-PAYMENT: base64 does not decode to JSON$/)
    bad(b64([1, 2]), /^X-PAYMENT: JSON is not an object$/)
    bad(b64({ scheme: 'exact' }), /^X-PAYMENT: x402Version is missing$/)
    bad(b64({ x402Version: 2 }), /^X-PAYMENT: x402Version must be 1, not 2$/)
    bad(v1Of(wire(message, signature), { scheme: 'upto' }), /^X-PAYMENT: scheme 'upto' is not supported; only 'exact'$/)
    bad(v1Of(wire(message, signature), { network: undefined }), /^X-PAYMENT: network is missing$/)
    bad(v1Of(undefined), /^X-PAYMENT: payload is missing$/)
    bad(v1Of({ authorization: auth }), /^X-PAYMENT: payload\.signature is missing$/)
    bad(v1Of({ signature: '0x1234', authorization: auth }), /^X-PAYMENT: payload\.signature must be 65 bytes of 0x-hex$/)
    bad(v1Of({ signature }), /^X-PAYMENT: payload\.authorization is missing$/)
    bad(
      v1Of({ signature, authorization: { ...auth, from: '0xnothex' } }),
      /^X-PAYMENT: payload\.authorization\.from must be a 0x-hex address$/,
    )
    bad(v1Of({ signature, authorization: { ...auth, to: undefined } }), /^X-PAYMENT: payload\.authorization\.to is missing$/)
    bad(v1Of({ signature, authorization: { ...auth, value: '-5' } }), /^X-PAYMENT: payload\.authorization\.value must be a uint256/)
    bad(
      v1Of({ signature, authorization: { ...auth, validBefore: '1e9' } }),
      /^X-PAYMENT: payload\.authorization\.validBefore must be a uint256/,
    )
    bad(
      v1Of({ signature, authorization: { ...auth, nonce: '0x12' } }),
      /^X-PAYMENT: payload\.authorization\.nonce must be 32 bytes of 0x-hex$/,
    )
    bad(b64({ x402Version: 2, payload: wire(message, signature) }), /^PAYMENT-SIGNATURE: accepted is missing$/, decodePaymentSignature)
    bad(b64({ x402Version: 1 }), /^PAYMENT-SIGNATURE: x402Version must be 2, not 1$/, decodePaymentSignature)
    bad(
      b64({ x402Version: 2, accepted: { ...paymentRequirementsV2(terms), scheme: 'upto' }, payload: wire(message, signature) }),
      /^PAYMENT-SIGNATURE: scheme 'upto' is not supported/,
      decodePaymentSignature,
    )
    t.type(new MalformedPaymentError('X-PAYMENT', 'x'), PaymentRefused)
  })

  t.test('the 402 body and PAYMENT-REQUIRED header have the x402 shapes', async (t) => {
    const body = paymentRequiredBody(terms, 'payment required')
    t.same(body, {
      x402Version: 1,
      error: 'payment required',
      accepts: [
        {
          scheme: 'exact',
          network: 'anvil',
          maxAmountRequired: '10000',
          resource: terms.resource,
          description: terms.description,
          mimeType: 'application/json',
          payTo,
          maxTimeoutSeconds: 60,
          asset: usdc,
          extra: { name: 'USD Coin', version: '2' },
        },
      ],
    })
    const header = paymentRequiredHeader(terms, 'payment required')
    t.match(header, /^[A-Za-z0-9+/]+={0,2}$/)
    t.same(JSON.parse(Buffer.from(header, 'base64').toString()), {
      x402Version: 2,
      error: 'payment required',
      resource: { url: terms.resource, description: terms.description, mimeType: 'application/json' },
      accepts: [
        {
          scheme: 'exact',
          network: 'eip155:31337',
          amount: '10000',
          asset: usdc,
          payTo,
          maxTimeoutSeconds: 60,
          extra: { name: 'USD Coin', version: '2' },
        },
      ],
    })
    const arbitrum = paymentRequiredBody({ ...terms, chainId: 42161 }, 'x').accepts[0]!
    t.equal(arbitrum.network, 'arbitrum')
    t.equal(paymentRequirementsV2({ ...terms, chainId: 42161 }).network, 'eip155:42161')
  })
})

const devnet = await startDevnet({ port: 0, addressBookPath: false, accounts: 3, snapshot: true })
t.teardown(() => devnet.stop())
const [redisA, redisB] = redisPair(t)

const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
const payer = privateKeyToAccount(devnet.accounts[1]!.privateKey)
const payTo = devnet.accounts[2]!.address
const { terms, xPayment, paymentSignature, signed, v1 } = paymentFixtures({
  usdc,
  payTo,
  chainId: devnet.chainId,
  payer,
})
const { publicClient } = createChainClients({ rpcUrl: devnet.rpcUrl, chainId: devnet.chainId })
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n

const namespace = await freshNamespace(t)

/** a gateway replica on `redis`: its reservations (its own cache of balances) and its verifier */
const replicaOn = (redis: Redis) => {
  const reservations = createReservations({ redis, chain: createPayerChain({ publicClient, asset: usdc }), namespace })
  return { reservations, verifier: createPaymentVerifier({ requirements: terms, reservations }) }
}
const [a, b] = [replicaOn(redisA), replicaOn(redisB)]
const verifier = a.verifier

t.test('a payment signed by a funded account verifies and yields the payer', async (t) => {
  t.equal(await verifier.verify(await v1(), nowS()), payer.address)
  const { message, signature } = await signed()
  t.equal(await verifier.verify(decodePaymentSignature(paymentSignature(message, signature)), nowS()), payer.address, 'v2 too')
})

const refused = async (t: Test, payment: Payment | Promise<Payment>, reason: string, message: RegExp, now = nowS()) => {
  const error = await verifier.verify(await payment, now).then(
    () => undefined,
    (e: unknown) => e,
  )
  t.type(error, PaymentRefused)
  t.match(
    error,
    { code: 'ATS_ERR_PAYMENT_REFUSED', statusCode: 402, reason, message },
    `${reason}: ${(error as Error | undefined)?.message}`,
  )
}

t.test('each wrong payment fails with its own message', async (t) => {
  const good = await signed()
  // the last hex digit of s: s stays low and r a valid point, so some other key recovers
  const flipped = (good.signature.slice(0, 129) + (good.signature[129] === 'a' ? 'b' : 'a') + good.signature.slice(130)) as Hex
  await refused(
    t,
    decodeXPayment(xPayment(good.message, flipped)),
    'signer_mismatch',
    /^invalid signature: signed by 0x[0-9a-fA-F]{40}, not by authorization\.from/,
  )
  const zeroR = `0x${'0'.repeat(64)}${good.signature.slice(66)}` as Hex
  await refused(
    t,
    decodeXPayment(xPayment(good.message, zeroR)),
    'invalid_signature',
    /^invalid signature: no public key recovers from it$/,
  )
  const highS =
    `${good.signature.slice(0, 66)}${(SECP256K1_N - BigInt(`0x${good.signature.slice(66, 130)}`)).toString(16).padStart(64, '0')}${good.signature.slice(130)}` as Hex
  await refused(t, decodeXPayment(xPayment(good.message, highS)), 'invalid_signature', /^invalid signature: s is in the upper half/)
  const changedValue = decodeXPayment(xPayment({ ...good.message, value: 20_000n }, good.signature))
  await refused(t, changedValue, 'signer_mismatch', /^invalid signature: signed by/)
  const someoneElse = privateKeyToAccount(devnet.accounts[0]!.privateKey)
  const forged = await signed(someoneElse, { from: payer.address })
  await refused(
    t,
    decodeXPayment(xPayment(forged.message, forged.signature)),
    'signer_mismatch',
    new RegExp(`signed by ${someoneElse.address}, not by authorization.from ${payer.address}`),
  )
  const badV = (good.signature.slice(0, 130) + '1d') as Hex
  await refused(t, decodeXPayment(xPayment(good.message, badV)), 'invalid_signature', /^invalid signature: v must be 27 or 28, not 29$/)

  await refused(
    t,
    v1(payer, { to: devnet.accounts[0]!.address }),
    'wrong_recipient',
    /^wrong recipient: authorization\.to 0x[0-9a-f]{40} is not payTo/,
  )
  await refused(t, v1(payer, { value: 9_999n }), 'amount_too_low', /^amount too low: 9999 < 10000$/)
  await refused(t, v1(payer, { validBefore: BigInt(nowS() - 1) }), 'expired', /^expired: validBefore \d+ is not after now/)
  await refused(t, v1(payer, { validBefore: BigInt(nowS() + 3) }), 'expired', /^expires too soon/)
  await refused(t, v1(payer, { validBefore: BigInt(nowS() + 3600) }), 'validity_too_long', /^valid too long/)
  await refused(t, v1(payer, { validAfter: BigInt(nowS() + 30) }), 'not_yet_valid', /^not yet valid: validAfter \d+ is after now/)
  await refused(t, v1(payer, {}, 'arbitrum'), 'wrong_network', /^wrong network: 'arbitrum'; this API is paid on eip155:31337 \/ anvil$/)
  const otherAsset = { ...paymentRequirementsV2(terms), asset: payTo }
  await refused(t, decodePaymentSignature(paymentSignature(good.message, good.signature, otherAsset)), 'wrong_asset', /^wrong asset: /)
})

t.test('a nonce pays once', async (t) => {
  const { message, signature } = await signed()
  t.equal(await verifier.verify(decodeXPayment(xPayment(message, signature)), nowS()), payer.address)
  await refused(t, decodePaymentSignature(paymentSignature(message, signature)), 'nonce_used', /^nonce already used: 0x[0-9a-f]{64} from /)
})

t.test('50 concurrent claims of one nonce on two gateways: exactly one wins', async (t) => {
  const once = await v1(payer, { validBefore: BigInt(nowS() + 60) })
  const claims = await Promise.all(Array.from({ length: 50 }, (_, i) => [a, b][i % 2]!.reservations.reserve(once, payer.address)))
  t.equal(claims.filter((claim) => claim.kind === 'ok').length, 1)
  const ttl = await redisA.pttl(nonceKeyOf(payer.address, once.authorization.nonce))
  t.ok(ttl > 60_000 && ttl <= 121_000, `the claim is kept until validBefore + margin (${ttl} ms)`)

  const payment = await v1()
  const outcomes = await Promise.allSettled(Array.from({ length: 50 }, (_, i) => [a, b][i % 2]!.verifier.verify(payment, nowS())))
  t.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1, 'one payment verified across two verifiers')
  t.ok(outcomes.every((o) => o.status === 'fulfilled' || /^nonce already used/.test((o.reason as Error).message)))
})

t.test('on one gateway, concurrent claims of one nonce are atomic too', async (t) => {
  const payment = await v1()
  const claims = await Promise.all(Array.from({ length: 50 }, () => a.reservations.reserve(payment, payer.address)))
  t.equal(claims.filter((claim) => claim.kind === 'ok').length, 1)
  t.same(await a.reservations.reserve(payment, payer.address), { kind: 'used' })
})

t.test('a reservation is kept until validBefore + margin, then dropped by the next payment', async (t) => {
  const payment = await v1()
  const { nonce, validBefore } = payment.authorization
  t.equal(await verifier.verify(payment, nowS()), payer.address)
  const base = `${RESERVATION_KEY_PREFIX}${namespace}:${payer.address.toLowerCase()}`
  t.equal(Number(await redisA.zscore(`${base}:expiries`, nonce)), Number(validBefore) * 1000 + 60_000, 'it expires at validBefore + 60 s')
  // as if that time had come
  await redisA.zadd(`${base}:expiries`, 'XX', Date.now() - 1, nonce)
  t.equal(await verifier.verify(await v1(), nowS()), payer.address)
  t.equal(await redisA.hget(`${base}:amounts`, nonce), null, 'expired reservations are gone (the chain refuses the nonce by then)')
})

t.test('an unreachable Redis or RPC fails closed with PaymentUnavailableError, not a 402', async (t) => {
  const dead = createReservations({ redis: deadRedis(t), chain: createPayerChain({ publicClient, asset: usdc }), namespace })
  await t.rejects(dead.reserve(await v1(), payer.address), { name: 'PaymentUnavailableError', message: /^reservation store unavailable: / })
  const offline = createChainClients({ rpcUrl: 'http://127.0.0.1:8679', chainId: devnet.chainId }).publicClient
  await t.rejects(createPayerChain({ publicClient: offline, asset: usdc }).balanceOf(payer.address), {
    name: 'PaymentUnavailableError',
    message: /^block number lookup failed: /,
  })
})

t.test('an account without USDC has insufficient funds', async (t) => {
  const poor = privateKeyToAccount(generatePrivateKey())
  await refused(
    t,
    v1(poor),
    'insufficient_funds',
    new RegExp(`^insufficient funds: ${poor.address} holds 0, of which 0 is reserved by unsettled payments; the payment is 10000$`),
  )
})

t.test('balances are cached and concurrent lookups share one call', async (t) => {
  let calls = 0
  const counting = {
    ...publicClient,
    readContract: ((args: unknown) => {
      calls++
      return publicClient.readContract(args as never)
    }) as typeof publicClient.readContract,
  }
  const chain = createPayerChain({ publicClient: counting, asset: usdc, ttlMs: 1_000 })
  const all = await Promise.all(Array.from({ length: 10 }, () => chain.balanceOf(payer.address)))
  t.ok(all.every((read) => read.balance === all[0]!.balance && read.balance > 0n))
  t.equal(calls, 1)
  await chain.balanceOf(payer.address)
  t.equal(calls, 1, 'cached')
  await sleep(1_100)
  await chain.balanceOf(payer.address)
  t.equal(calls, 2, 'looked up again after the TTL')
})
