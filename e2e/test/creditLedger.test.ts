import { freePorts } from '@ats/service-kit/testing'
import t from 'tap'
import { creditFlow } from './creditFlow.ts'
import { eventually, startAgentFleet } from './fleet.ts'

/**
 * Prepaid credit from the ledger's side, through a gateway, on the devnet: a top-up paid with
 * @x402/fetch becomes spendable once admin settles its payment on chain; requests signed in with
 * the wallet spend it; a failed job's hold comes back; a withdrawal pays what is left back on
 * chain, once.
 */

const price = 10_000n

const [port] = await freePorts(1)
const publicUrl = `http://127.0.0.1:${port}`
// the whole agent path: a job whose tool's upstream (the CoinGecko stand-in) answers 500 fails
const fleet = await startAgentFleet(t, {
  marketEnv: { PRICE_SOURCE: 'coingecko' },
  gatewayEnv: { PORT: String(port), PUBLIC_URL: publicUrl, PAYMENT_PRICE: String(price) },
  // settles the top-ups on chain from the server wallet (devnet account 0), looking often
  adminEnv: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '100', CREDIT_SWEEP_MS: '50' },
})

const { fundedWallet, creditOf, toppedUp, sessionOf } = creditFlow(fleet, publicUrl)

t.test('a top-up paid with @x402/fetch is credited once it settles; spent signed in; the rest withdrawn on chain once', async (t) => {
  const payer = await fundedWallet(5_000_000n)
  const wallet = payer.address.toLowerCase()
  // the devnet's USDC is not one of the client's default assets: allowed, up to the top-up
  const credited = await toppedUp(payer, 2_000_000n)
  t.match(credited, { balance: '2000000', held: '0', pendingTopUps: [], recent: [{ kind: 'topup', amount: '2000000' }] })
  t.equal(await fleet.balanceOf(payer.address), 3_000_000n, 'the top-up moved on chain')

  // spent without a new authorization: a session from one sign-in
  const bearer = await sessionOf(payer)
  for (let i = 0; i < 3; i++) {
    const res = await fetch(`${publicUrl}/agent/skills?i=${i}`, { headers: bearer })
    t.equal(res.status, 200)
    await res.body?.cancel()
  }
  const spent = await eventually('three prices kept by the ledger', async () => {
    const c = await creditOf(wallet)
    return c.balance === String(2_000_000n - 3n * price) && c.held === '0' ? c : undefined
  })
  t.equal(spent.available, String(2_000_000n - 3n * price))

  const key = 'withdraw-the-rest'
  const withdraw = () =>
    fetch(`${publicUrl}/credit/withdraw`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'application/json', 'idempotency-key': key },
      body: '{}',
    })
  const first = await withdraw()
  const paid = (await first.json()) as { state: string; amount: string; txHash: string }
  t.equal(first.status, 200, 'paid within the receipt wait')
  t.match(paid, { wallet, amount: String(2_000_000n - 3n * price), state: 'paid', txHash: /^0x[0-9a-f]{64}$/ })
  t.equal(await fleet.balanceOf(payer.address), 3_000_000n + 2_000_000n - 3n * price, 'the rest is back in the wallet')

  const again = await withdraw()
  t.same({ status: again.status, body: await again.json() }, { status: 200, body: paid }, 'a repeat answers the first result')
  t.equal(await fleet.balanceOf(payer.address), 3_000_000n + 2_000_000n - 3n * price, 'and pays nothing more')
  t.match(await creditOf(wallet), { available: '0', balance: '0', held: '0' })
})

t.test('a job paid by credit that fails gives its hold back: only the hold moved, and it came back', async (t) => {
  const payer = await fundedWallet(2_000_000n)
  const wallet = payer.address.toLowerCase()
  await toppedUp(payer, 1_000_000n)
  const bearer = await sessionOf(payer)
  fleet.upstreams.behave('/simple/price', 500)
  t.teardown(() => fleet.upstreams.behave('/simple/price', 'ok'))

  const started = await fetch(`${publicUrl}/agent/prompt`, {
    method: 'POST',
    headers: { ...bearer, 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'price of ETH' }),
  })
  t.equal(started.status, 202)
  const { jobId } = (await started.json()) as { jobId: string }
  t.ok(jobId)

  const back = await eventually(
    "the failed job's hold released",
    async () => {
      const c = await creditOf(wallet)
      return c.recent.some((e) => e.kind === 'release') && c.held === '0' ? c : undefined
    },
    30_000,
  )
  t.match(back, { available: '1000000', balance: '1000000', held: '0' }, 'the credit is whole again')
  const hold = back.recent.find((e) => e.kind === 'hold')!
  t.match(
    back.recent.find((e) => e.kind === 'release'),
    { amount: hold.amount },
    'all of the hold came back',
  )
  t.notOk(
    back.recent.some((e) => e.kind === 'capture'),
    'nothing was kept',
  )
})
