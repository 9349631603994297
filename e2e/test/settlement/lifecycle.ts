import { eip3009Abi } from '@ats/chain'
import { identityHeaders } from '@ats/contracts'
import { eventually, testInternalToken } from '@ats/service-kit/testing'
import t from 'tap'
import type { Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { adminKey, startAgentFleet } from '../fleet.ts'

/**
 * The payment of POST /agent/prompt is settled only when its job completes: through the gateway,
 * with real x402 payments and settlement on the devnet. A job that fails (here: its tool's
 * upstream, the CoinGecko stand-in, answers 500) voids its payment; the EIP-3009 authorization
 * is never used, and the ledger says why.
 */
t.test('a failed job is never charged; a completed job is settled on chain', async (t) => {
  const fleet = await startAgentFleet(t, {
    marketEnv: { PRICE_SOURCE: 'coingecko' },
    adminEnv: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '100' },
  })
  const { request, pay, devnet, publicClient, usdc, payTo, balanceOf } = fleet
  // two payers: the one whose job fails, and the one whose job completes
  const failing = privateKeyToAccount(devnet.accounts[2]!.privateKey)
  const completing = fleet.payer

  /** a job's state, read from the agent directly (through the gateway every read is a payment) */
  const finished = (jobId: string, owner: string) =>
    eventually(`job ${jobId} finished`, async () => {
      const res = await fetch(`${fleet.agent.url}/agent/job/${jobId}`, {
        headers: { [identityHeaders.internalToken]: testInternalToken, [identityHeaders.ownerId]: owner },
      })
      const job = (await res.json()) as any
      return ['complete', 'failed', 'cancelled'].includes(job.status) ? job : undefined
    })
  const ledgerEntry = (jobId: string, state: string) =>
    eventually(
      `the payment of ${jobId} ${state}`,
      async () => {
        const { body } = await request('/admin/revenue', { key: adminKey })
        const entry = body.recentPayments.find((p: any) => p.jobId === jobId)
        return entry?.settlement === state ? { entry, revenue: body } : undefined
      },
      20_000,
    )

  const before = {
    failing: await balanceOf(failing.address),
    completing: await balanceOf(completing.address),
    payTo: await balanceOf(payTo),
  }
  fleet.upstreams.behave('/simple/price', 500)

  const failingPayment = await pay({ payer: failing })
  const nonce = JSON.parse(Buffer.from(failingPayment, 'base64').toString('utf8')).payload.authorization.nonce as Hex
  const failed = await request('/agent/prompt', {
    method: 'POST',
    body: { prompt: 'price of ETH' },
    headers: { 'x-payment': failingPayment },
  })
  t.equal(failed.status, 202)
  t.match(
    JSON.parse(Buffer.from(failed.headers.get('x-payment-response')!, 'base64').toString('utf8')),
    { success: true },
    'accepted: the payment is authorized',
  )
  const completed = await request('/agent/prompt', {
    method: 'POST',
    body: { prompt: 'show trending pools' },
    headers: { 'x-payment': await pay() },
  })
  t.equal(completed.status, 202)

  const failedJob = await finished(failed.body.jobId, failing.address)
  t.equal(failedJob.status, 'failed')
  t.match(failedJob.error, /^the get_prices step failed: /, 'the tool failed through no fault of the payer')
  t.equal((await finished(completed.body.jobId, completing.address)).status, 'complete')

  // settlement has run: the completed job's payment is on chain, the failed one's voided with the reason
  const settled = await ledgerEntry(completed.body.jobId, 'settled')
  t.match(settled.entry, {
    payer: completing.address,
    route: 'POST /agent/prompt',
    amount: '10000',
    txHash: /^0x[0-9a-f]{64}$/,
    voidReason: null,
  })
  t.equal((await publicClient.getTransactionReceipt({ hash: settled.entry.txHash })).status, 'success')
  const { entry: voided, revenue } = await ledgerEntry(failed.body.jobId, 'voided')
  t.match(voided, { payer: failing.address, route: 'POST /agent/prompt', amount: '10000', txHash: null, voidReason: failedJob.error })
  t.match(revenue.voided, { count: 1, totalUsdc: '10000' }, 'shown apart from the revenue')

  t.equal(await balanceOf(failing.address), before.failing, "the failing job's payer paid nothing")
  t.equal(await balanceOf(completing.address), before.completing - 10_000n, "the completed job's payer paid once")
  t.equal(await balanceOf(payTo), before.payTo + 10_000n)
  const used = await publicClient.readContract({
    address: usdc,
    abi: eip3009Abi,
    functionName: 'authorizationState',
    args: [failing.address, nonce],
  })
  t.equal(used, false, 'the voided authorization was never used: it simply expires')

  t.test('a prompt paid with a window too short for its job is refused (402), its nonce kept', async (t) => {
    const now = BigInt(Math.floor(Date.now() / 1000))
    // long enough for a read (PAYMENT_MIN_VALIDITY_SECONDS, 60 s), too short for a job
    const short = await pay({ validBefore: now + 120n })
    const res = await request('/agent/prompt', { method: 'POST', body: { prompt: 'price of ETH' }, headers: { 'x-payment': short } })
    t.equal(res.status, 402)
    t.match(res.body.error, /^expires too soon for a job: .* validBefore must be at least 300 s after now/)
    const { nonce: shortNonce } = JSON.parse(Buffer.from(short, 'base64').toString('utf8')).payload.authorization
    // the same short payment still buys a read, which settles at once: its nonce was not burned
    const read = await request('/agent/skills', { headers: { 'x-payment': short } })
    t.equal(read.status, 200, `the nonce ${shortNonce} was not used by the refusal`)
  })

  t.test("the job answers show their payment's state", async (t) => {
    const failedView = await request(`/agent/job/${failed.body.jobId}`, { headers: { 'x-payment': await pay({ payer: failing }) } })
    t.match(failedView.body, { status: 'failed', payment: { state: 'voided', reason: failedJob.error } })
    const completedView = await request(`/agent/job/${completed.body.jobId}`, { headers: { 'x-payment': await pay() } })
    t.match(completedView.body, { status: 'complete', payment: { state: 'settled', txHash: settled.entry.txHash } })
    // other /agent/* routes settle at once, as before: this read of the failed job is charged
    await eventually(
      'the read settled',
      async () => ((await balanceOf(failing.address)) === before.failing - 10_000n ? true : undefined),
      20_000,
    )
  })
})
