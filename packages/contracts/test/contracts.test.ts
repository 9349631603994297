import t from 'tap'
import { Compile } from 'typebox/compile'
import {
  Address,
  adminContract,
  apiKeyPattern,
  Bytes32,
  codec,
  hashApiKey,
  KeyVerifyReply,
  MessageError,
  natsChannels,
  paymentsMessageId,
  publicRoutes,
  serviceContracts,
  tierAllows,
} from '../src/index.ts'

t.test('a higher tier may use the routes of lower tiers, never the reverse', async (t) => {
  t.ok(tierAllows('admin', 'readonly'))
  t.ok(tierAllows('readwrite', 'readwrite'))
  t.notOk(tierAllows('readonly', 'readwrite'))
  t.notOk(tierAllows('readwrite', 'admin'))
})

t.test('the api-key format is scannable and keys hash to SHA-256 hex', async (t) => {
  t.match('atsk_' + 'a'.repeat(32), apiKeyPattern)
  t.notMatch('atsk_' + 'a'.repeat(31), apiKeyPattern)
  t.notMatch('sk_' + 'a'.repeat(32), apiKeyPattern)
  t.match(hashApiKey('atsk_x'), /^[0-9a-f]{64}$/)
  t.equal(hashApiKey('atsk_x'), hashApiKey('atsk_x'))
})

t.test('a codec refuses messages that do not match the schema, both ways', async (t) => {
  const c = codec(KeyVerifyReply)
  const bytes = c.encode({ key: { id: 'key_1', tier: 'admin', wallet: null } })
  t.same(c.decode(bytes), { key: { id: 'key_1', tier: 'admin', wallet: null } })
  t.throws(() => c.decode(new TextEncoder().encode('{"key":{"id":"x","tier":"root","wallet":null}}')), MessageError)
  t.throws(() => c.decode(new TextEncoder().encode('not json')), /not JSON/)
  t.throws(() => c.encode({ key: { id: 1 } } as never), MessageError)
})

t.test('shared primitives check addresses and 32-byte values', async (t) => {
  const address = Compile(Address())
  t.ok(address.Check('0x' + 'aB'.repeat(20)))
  t.notOk(address.Check('0x' + 'a'.repeat(39)))
  t.notOk(Compile(Bytes32()).Check('0x1234'))
})

t.test('every service registers its routes and channels once, under the namespace', async (t) => {
  const channels = natsChannels('nsx')
  t.equal(channels.admin.keyVerify.subject, 'nsx.admin.keys.verify')
  t.equal(channels.admin.keyPolicy.subject, 'nsx.admin.keys.policy')
  t.equal(channels.admin.keyRevoked.subject, 'nsx.admin.keys.revoked')
  t.equal(channels.admin.payments.charged.subject, 'nsx.payments.charged')
  t.equal(channels.admin.payments.stream, 'nsx_payments')
  t.same(Object.keys(channels).sort(), Object.keys(serviceContracts).sort())
  const routes = Object.values(serviceContracts).flatMap((c) => Object.values(c.routes))
  t.equal(publicRoutes.length, routes.length)
  t.ok(publicRoutes.includes(adminContract.routes.createKey))
  t.equal(new Set(publicRoutes.map((r) => `${r.method} ${r.url}`)).size, publicRoutes.length, 'no route declared twice')
})

t.test("a batch's message id covers all its payments: batches that share a first payment and a count are different messages", async (t) => {
  const charge = (payer: string, nonce: string) =>
    ({ authorization: { from: payer, nonce } }) as unknown as Parameters<typeof paymentsMessageId>[0]['charges'][number]
  const [a, b, c] = ['0x' + 'a'.repeat(40), '0x' + 'b'.repeat(40), '0x' + 'c'.repeat(40)]
  const nonce = (n: number) => `0x${n.toString(16).padStart(64, '0')}`
  const first = paymentsMessageId({ charges: [charge(a, nonce(1)), charge(b, nonce(2))] })
  t.not(
    first,
    paymentsMessageId({ charges: [charge(a, nonce(1)), charge(c, nonce(3))] }),
    "another payer's charge behind the same first payment",
  )
  t.not(first, paymentsMessageId({ charges: [charge(a, nonce(1)), charge(b, nonce(3))] }), 'another nonce')
  t.equal(
    first,
    paymentsMessageId({ charges: [charge(a.toUpperCase().replace('0X', '0x'), nonce(1)), charge(b, nonce(2))] }),
    'the same batch again (any case) is a duplicate',
  )
  t.match(first, /^charges:[0-9a-f]{64}$/)
})
