import { createService } from '@ats/service-kit'
import { freePorts, recordingFetch } from '@ats/service-kit/testing'
import { gatewayService } from '@ats/gateway/service'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { SIGN_IN_WITH_X, wrapFetchWithSIWx } from '@x402/extensions/sign-in-with-x'
import { wrapFetchWithPayment, x402Client } from '@x402/fetch'
import t from 'tap'
import { privateKeyToAccount } from 'viem/accounts'
import { adminKey, eventually, startPaidFleet } from './fleet.ts'

/**
 * Prepaid credit from the client's side, through the gateway to the real admin ledger on the
 * devnet, with x402's own clients unmodified: a top-up paid with @x402/fetch, 20 requests spent
 * through wrapFetchWithSIWx with no new authorization, then 50 requests at once over two gateways
 * against the 10 prices left.
 */

const network = 'eip155:31337'
// 1 USDC (the smallest top-up) buys 10 requests
const price = 100_000n
const [port] = await freePorts(1)
const publicUrl = `http://127.0.0.1:${port}`
const fleet = await startPaidFleet(t, {
  gatewayEnv: { PORT: String(port), PUBLIC_URL: publicUrl, PAYMENT_PRICE: String(price) },
  // top-ups become credit once admin settles them on chain: settle often
  adminEnv: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '100', CREDIT_SWEEP_MS: '50' },
})
// a second gateway on the same Redis, NATS and admin
const second = await createService(gatewayService, { ...fleet.gatewayEnv, PORT: '0' })
t.teardown(() => second.close())
const secondUrl = await second.listen()

const payer = privateKeyToAccount(fleet.devnet.accounts[5]!.privateKey)
const wallet = payer.address.toLowerCase()
const availableOf = async () => {
  const res = await fleet.request(`/credit?wallet=${wallet}`, { key: adminKey })
  if (res.status !== 200) throw new Error(`GET /credit answered ${res.status}: ${JSON.stringify(res.body)}`)
  return BigInt((res.body as { available: string }).available)
}

t.test(
  'a top-up paid with @x402/fetch, then 20 requests through wrapFetchWithSIWx: the credit falls by 20 prices, nothing signed but sign-ins',
  async (t) => {
    const pay = wrapFetchWithPayment(
      fetch,
      x402Client.fromConfig({
        schemes: [{ network, client: new ExactEvmScheme(payer) }],
        spendControls: { allowedAssets: [{ network, asset: fleet.usdc, maxAmountPerPayment: '3000000' }] },
      }),
    )
    const topUp = await pay(`${publicUrl}/credit/topup?amount=3000000`, { method: 'POST' })
    t.equal(topUp.status, 202)
    t.match(await topUp.json(), { wallet, amount: '3000000', state: 'pending' })
    await eventually('the top-up settled and credited', async () => ((await availableOf()) === 3_000_000n ? true : undefined), 30_000)

    const { fetch: recording, sent } = recordingFetch()
    const signedIn = wrapFetchWithSIWx(recording, payer)
    for (let i = 0; i < 20; i++) {
      const res = await signedIn(`${publicUrl}/agent/skills?i=${i}`)
      t.equal(res.status, 200, `request ${i}`)
      await res.body?.cancel()
    }
    t.equal(sent.filter((h) => h.has(SIGN_IN_WITH_X)).length, 20, 'each call signed in (a sign-in is not a payment)')
    t.notOk(
      sent.some((h) => h.has('payment-signature') || h.has('x-payment')),
      'no payment authorization after the top-up',
    )
    await eventually('20 prices kept by the ledger', async () => ((await availableOf()) === 3_000_000n - 20n * price ? true : undefined))
  },
)

t.test('50 requests at once over two gateways against 10 prices of credit: exactly 10 served, the rest 402 with a top-up', async (t) => {
  const session = await wrapFetchWithSIWx(fetch, payer)(`${publicUrl}/credit/session`, { method: 'POST' })
  t.equal(session.status, 200)
  const { token } = (await session.json()) as { token: string }
  const answers = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      fetch(`${i % 2 ? secondUrl : publicUrl}/agent/skills?burst=${i}`, { headers: { authorization: `Bearer ${token}` } }),
    ),
  )
  const statuses = answers.map((a) => a.status)
  t.equal(statuses.filter((s) => s === 200).length, 10)
  t.equal(statuses.filter((s) => s === 402).length, 40)
  const refusal = (await answers.find((a) => a.status === 402)!.json()) as Record<string, unknown>
  t.match(refusal, {
    error: /^insufficient credit: 0x[0-9a-fA-F]{40} has 0 available, this request costs 100000/,
    accepts: [{ scheme: 'exact', maxAmountRequired: price.toString() }],
    topUp: { url: `${publicUrl}/credit/topup?amount=1000000`, minimum: '1000000' },
  })
  await Promise.all(answers.filter((a) => !a.bodyUsed).map((a) => a.body?.cancel()))
  await eventually('the ledger at 0', async () => ((await availableOf()) === 0n ? true : undefined))
})
