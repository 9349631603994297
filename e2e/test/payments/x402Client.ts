// x402's own client (@x402/fetch) paying through the gateway, with and without spend controls.
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment, x402Client, type x402ClientConfig } from '@x402/fetch'
import t from 'tap'
import { getAddress } from 'viem'
import type { privateKeyToAccount } from 'viem/accounts'
import { adminKey, eventually, startPaidFleet } from '../fleet.ts'

const network = 'eip155:31337'

t.test("x402's own client pays through the gateway", async (t) => {
  // one fleet for the file: the first test, which reads the ledger, runs before anything else pays
  const fleet = await startPaidFleet(t, { adminEnv: { SETTLEMENT_ENABLED: 'false' } })

  /** The real client: @x402/fetch over an inner fetch that records every request it is handed. */
  function payingFetch(payer: ReturnType<typeof privateKeyToAccount>, spendControls: x402ClientConfig['spendControls']) {
    const sent: Headers[] = []
    const recordingFetch: typeof fetch = async (input, init) => {
      const request = new Request(input, init)
      sent.push(new Headers(request.headers))
      return fetch(request)
    }
    const client = x402Client.fromConfig({
      schemes: [{ network, client: new ExactEvmScheme(payer) }],
      ...(spendControls === undefined ? {} : { spendControls }),
    })
    return { fetch: wrapFetchWithPayment(recordingFetch, client), sent }
  }

  const decode = (header: string) => JSON.parse(Buffer.from(header, 'base64').toString('utf8'))

  t.test('a real @x402/fetch client pays, gets past the 402, and the payment appears in /admin/revenue', async (t) => {
    const { gateway, payer, payTo, usdc, request } = fleet
    const url = `${gateway.url}/agent/skills`

    const unpaid = await fetch(url)
    t.equal(unpaid.status, 402, 'a plain fetch without payment gets 402')
    await unpaid.body?.cancel()

    const { fetch: pay, sent } = payingFetch(payer, {
      allowedAssets: [{ network, asset: usdc, maxAmountPerPayment: '100000' }],
    })
    const res = await pay(url)
    t.equal(res.status, 200)
    const body = (await res.json()) as { headers: Record<string, string> }
    t.equal(body.headers['x-ats-owner-id'], getAddress(payer.address), 'the payer is the owner the service sees')
    t.notOk('payment-signature' in body.headers, 'the payment header is not forwarded')

    t.equal(sent.length, 2, 'one unpaid try, one paid retry')
    t.notOk(sent[0]!.has('payment-signature'), 'the first try carries no payment')
    const signature = sent[1]!.get('payment-signature')
    t.ok(signature, 'the retry carries the v2 PAYMENT-SIGNATURE header')
    t.notOk(sent[1]!.has('x-payment'), 'and not the v1 X-PAYMENT header')
    t.match(decode(signature!), {
      x402Version: 2,
      accepted: { scheme: 'exact', network, asset: usdc, amount: '10000', payTo },
      payload: {
        signature: /^0x[0-9a-f]{130}$/i,
        authorization: { from: payer.address, to: payTo, value: '10000', nonce: /^0x[0-9a-f]{64}$/i },
      },
    })
    t.match(
      decode(res.headers.get('payment-response')!),
      { success: true, network, payer: getAddress(payer.address) },
      'the answer carries PAYMENT-RESPONSE',
    )

    const revenue = await eventually('the payment in /admin/revenue', async () => {
      const res = await request('/admin/revenue', { key: adminKey })
      return res.body.requestCount === 1 ? res.body : undefined
    })
    t.match(revenue, {
      totalUsdc: '10000',
      totalUsd: '$0.01',
      uniquePayers: 1,
      recentPayments: [{ payer: getAddress(payer.address), amount: '10000', route: 'GET /agent/skills' }],
    })
  })

  t.test('with spendControls: false the client pays too, and its payment cannot be replayed', async (t) => {
    const { gateway, payer } = fleet
    const url = `${gateway.url}/agent/skills`
    const { fetch: pay, sent } = payingFetch(payer, false)

    const res = await pay(url)
    t.equal(res.status, 200)
    await res.body?.cancel()

    const replay = await fetch(url, { headers: { 'payment-signature': sent[1]!.get('payment-signature')! } })
    t.equal(replay.status, 402, 'the same PAYMENT-SIGNATURE cannot be spent twice')
    t.match(await replay.json(), { error: /^nonce already used/ })
  })

  t.test('by default the client refuses to pay an asset it does not know, such as the devnet USDC', async (t) => {
    const { gateway, payer } = fleet
    const { fetch: pay, sent } = payingFetch(payer, undefined)
    await t.rejects(pay(`${gateway.url}/agent/skills`), /rejected by spendControls/)
    t.equal(sent.length, 1, 'it never retried with a payment')
  })
})
