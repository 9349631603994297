import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { transferWithAuthorizationTypes, usdcDomain } from '@ats/chain'
import { startDevnet } from '@ats/devnet'
import t, { type Test } from 'tap'
import { keccak256, toHex, type Address } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { startFleet } from './fleet.ts'


async function paidFleet(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const addressBookPath = join(mkdtempSync(join(tmpdir(), 'book-')), 'address-book.json')
  const devnet = await startDevnet({ port: 8681, addressBookPath })
  t.teardown(() => devnet.stop())
  const payTo = devnet.accounts[9]!.address
  const fleet = await startFleet(t, {
    gatewayEnv: { PAY_TO: payTo, RPC_URL: devnet.rpcUrl, CHAIN_ID: '31337', ADDRESS_BOOK: addressBookPath, ...extra },
  })
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
  const payer = privateKeyToAccount(devnet.accounts[1]!.privateKey)
  let counter = 0
  const pay = async (overrides: { value?: bigint; to?: Address } = {}) => {
    const now = BigInt(Math.floor(Date.now() / 1000))
    const authorization = {
      from: payer.address,
      to: overrides.to ?? payTo,
      value: overrides.value ?? 10_000n,
      validAfter: now - 5n,
      validBefore: now + 60n,
      nonce: keccak256(toHex(`payment ${Date.now()} ${counter++}`)),
    }
    const signature = await payer.signTypedData({
      domain: usdcDomain(31337, usdc),
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: authorization,
    })
    const header = {
      x402Version: 1,
      scheme: 'exact',
      network: 'eip155:31337',
      payload: { signature, authorization: Object.fromEntries(Object.entries(authorization).map(([k, v]) => [k, String(v)])) },
    }
    return Buffer.from(JSON.stringify(header)).toString('base64')
  }
  return { ...fleet, devnet, payTo, payer, usdc, pay }
}

t.test('a paid route without a payment answers 402 with the requirements in the body and the v2 header', async (t) => {
  const { request, payTo, usdc } = await paidFleet(t)
  const res = await request('/agent/skills')
  t.equal(res.status, 402)
  t.match(res.body, {
    x402Version: 1,
    error: /payment required/,
    accepts: [{ scheme: 'exact', maxAmountRequired: '10000', payTo, asset: usdc, extra: { name: 'USD Coin', version: '2' } }],
  })
  const v2 = JSON.parse(Buffer.from(res.headers.get('payment-required')!, 'base64').toString('utf8'))
  t.match(v2, { x402Version: 2, accepts: [{ network: 'eip155:31337', amount: '10000' }] })
})

t.test('a valid X-PAYMENT passes once; the payer is the owner the service sees', async (t) => {
  const { request, pay, payer } = await paidFleet(t)
  const header = await pay()
  const res = await request('/agent/skills', { headers: { 'x-payment': header } })
  t.equal(res.status, 200)
  t.equal(res.body.headers['x-ats-owner-id'], payer.address)
  t.notOk('x-payment' in res.body.headers, 'the payment header is not forwarded')
  const replay = await request('/agent/skills', { headers: { 'x-payment': header } })
  t.equal(replay.status, 402)
  t.match(replay.body.error, /^nonce already used/)
})

t.test('wrong recipient, too small an amount and garbage each answer 402 saying so', async (t) => {
  const { request, pay, devnet } = await paidFleet(t)
  const cases: Array<[string, RegExp]> = [
    [await pay({ to: devnet.accounts[3]!.address }), /^wrong recipient/],
    [await pay({ value: 9_999n }), /^amount too low: 9999 < 10000/],
    ['%%%not-base64%%%', /X-PAYMENT/],
  ]
  for (const [header, error] of cases) {
    const res = await request('/agent/skills', { headers: { 'x-payment': header } })
    t.equal(res.status, 402)
    t.match(res.body, { x402Version: 1, error, accepts: Array })
  }
})

t.test('SKIP_PAYMENT lets paid routes through with a development owner', async (t) => {
  const { request } = await paidFleet(t, { SKIP_PAYMENT: 'true' })
  const res = await request('/agent/skills')
  t.equal(res.status, 200)
  t.equal(res.body.headers['x-ats-owner-id'], '0x000000000000000000000000000000000000dEaD')
})
