import { transferWithAuthorizationTypes } from '@ats/chain'
import { paymentRequiredBody, paymentRequiredHeader, paymentRequirementsV2 } from '@ats/contracts'
import t from 'tap'
import { hashTypedData, recoverTypedDataAddress, toHex, type Address } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { createAuthorizationSigning } from '../src/payments/signature.ts'
import { decodePaymentSignature, decodeXPayment, MalformedPaymentError, PaymentError, paymentFromHeaders } from '../src/payments/index.ts'
import { b64, paymentFixtures } from './paymentFixtures.ts'

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
  t.equal(toHex(digest), hashTypedData({ domain, types: transferWithAuthorizationTypes, primaryType: 'TransferWithAuthorization', message }))
  const viemSigner = await recoverTypedDataAddress({ domain, types: transferWithAuthorizationTypes, primaryType: 'TransferWithAuthorization', message, signature })
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
  t.same({ ...fromV2, x402Version: 1, network: 'anvil', asset: undefined }, { ...fromV1, asset: undefined })
  t.equal(fromV2.network, 'eip155:31337')
  t.equal(fromV2.asset, usdc.toLowerCase())
  t.same(paymentFromHeaders({ 'x-payment': xPayment(message, signature) }), fromV1)
  t.same(paymentFromHeaders({ 'payment-signature': paymentSignature(message, signature), 'x-payment': 'junk' }), fromV2)
  t.equal(paymentFromHeaders({}), undefined)
  const hexValues = decodeXPayment(b64({ x402Version: 1, scheme: 'exact', network: 'anvil', payload: { signature, authorization: { ...wire(message, signature).authorization, value: '0x2710' } } }))
  t.equal(hexValues.authorization.value, 10_000n, 'uint256 fields may be 0x-hex')

  const bad = (raw: string, error: RegExp, decode = decodeXPayment) => {
    t.throws(() => decode(raw), error, error.source)
    try {
      decode(raw)
    } catch (e) {
      t.type(e, PaymentError)
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
  bad(v1Of({ signature, authorization: { ...auth, from: '0xnothex' } }), /^X-PAYMENT: payload\.authorization\.from must be a 0x-hex address$/)
  bad(v1Of({ signature, authorization: { ...auth, to: undefined } }), /^X-PAYMENT: payload\.authorization\.to is missing$/)
  bad(v1Of({ signature, authorization: { ...auth, value: '-5' } }), /^X-PAYMENT: payload\.authorization\.value must be a uint256/)
  bad(v1Of({ signature, authorization: { ...auth, validBefore: '1e9' } }), /^X-PAYMENT: payload\.authorization\.validBefore must be a uint256/)
  bad(v1Of({ signature, authorization: { ...auth, nonce: '0x12' } }), /^X-PAYMENT: payload\.authorization\.nonce must be 32 bytes of 0x-hex$/)
  bad(b64({ x402Version: 2, payload: wire(message, signature) }), /^PAYMENT-SIGNATURE: accepted is missing$/, decodePaymentSignature)
  bad(b64({ x402Version: 1 }), /^PAYMENT-SIGNATURE: x402Version must be 2, not 1$/, decodePaymentSignature)
  bad(
    b64({ x402Version: 2, accepted: { ...paymentRequirementsV2(terms), scheme: 'upto' }, payload: wire(message, signature) }),
    /^PAYMENT-SIGNATURE: scheme 'upto' is not supported/,
    decodePaymentSignature,
  )
  t.type(new MalformedPaymentError('X-PAYMENT', 'x'), PaymentError)
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
      { scheme: 'exact', network: 'eip155:31337', amount: '10000', asset: usdc, payTo, maxTimeoutSeconds: 60, extra: { name: 'USD Coin', version: '2' } },
    ],
  })
  const arbitrum = paymentRequiredBody({ ...terms, chainId: 42161 }, 'x').accepts[0]!
  t.equal(arbitrum.network, 'arbitrum')
  t.equal(paymentRequirementsV2({ ...terms, chainId: 42161 }).network, 'eip155:42161')
})
