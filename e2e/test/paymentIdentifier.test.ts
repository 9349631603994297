import { gatewayService } from '@ats/gateway/service'
import { startService } from '@ats/service-kit/testing'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions, generatePaymentId, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier'
import { wrapFetchWithPayment, x402Client, x402HTTPClient } from '@x402/fetch'
import t, { type Test } from 'tap'
import { getAddress } from 'viem'
import { adminKey, eventually, startAgentFleet } from './fleet.ts'

/**
 * Idempotent paid requests, as a client using x402's own packages makes them: a payment id
 * (the payment-identifier extension) sent with a paid prompt, through gateways sharing Redis,
 * to the agent, with admin settling on the devnet.
 */
const fleet = await startAgentFleet(t, { adminEnv: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '100' } })
const network = 'eip155:31337'
const prompt = { prompt: 'What is the price of ETH?' }

/** x402's client for the fleet's payer, adding `id` to every payment (x402's documented hook). */
function clientWithId(id: string) {
  const client = x402Client.fromConfig({
    schemes: [{ network, client: new ExactEvmScheme(fleet.payer) }],
    spendControls: { allowedAssets: [{ network, asset: fleet.usdc, maxAmountPerPayment: '100000' }] },
  })
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    paymentRequired.extensions ??= {}
    appendPaymentIdentifierToExtensions(paymentRequired.extensions, id)
  })
  return client
}

const post = (gateway: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${gateway}/agent/prompt`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  })

/** One signed payment with the id, made by x402's client from the gateway's 402: its PAYMENT-SIGNATURE header. */
async function signedPayment(t: Test, id: string) {
  const unpaid = await post(fleet.gateway.url, prompt)
  t.equal(unpaid.status, 402)
  const http = new x402HTTPClient(clientWithId(id))
  const required = http.getPaymentRequiredResponse((name) => unpaid.headers.get(name), await unpaid.json())
  t.match(
    required.extensions,
    { [PAYMENT_IDENTIFIER]: { info: { required: false } }, bazaar: {} },
    'the 402 advertises payment ids beside bazaar',
  )
  return http.encodePaymentSignatureHeader(await http.createPaymentPayload(required))
}

const revenue = async () => (await fleet.request('/admin/revenue', { key: adminKey })).body
const jobsOfPayer = async () => {
  const key = await fleet.request('/admin/keys', {
    method: 'POST',
    key: adminKey,
    body: { tier: 'readonly', label: 'payer jobs', wallet: fleet.payer.address },
  })
  return (await fleet.request('/portfolio/jobs?limit=50', { key: key.body.key })).body.jobs as Array<{ id: string; status: string }>
}

t.test('the same paid prompt sent 5 times at once with one payment id: one job, one payment, settled once', async (t) => {
  const id = generatePaymentId()
  const before = await fleet.balanceOf(fleet.payer.address)
  const header = await signedPayment(t, id)
  const answers = await Promise.all(Array.from({ length: 5 }, () => post(fleet.gateway.url, prompt, header)))
  t.same(
    answers.map((a) => a.status),
    [202, 202, 202, 202, 202],
  )
  const bodies = await Promise.all(answers.map((a) => a.json() as Promise<{ jobId: string; threadId: string; status: string }>))
  const [first] = bodies
  t.match(first, { jobId: /^job_/, threadId: /^thr_/, status: 'pending' })
  t.ok(
    bodies.every((b) => b.jobId === first!.jobId && b.threadId === first!.threadId),
    `every answer names job ${first!.jobId}`,
  )

  t.test('a retry through x402 fetch (a newly signed payment, the same id) on another gateway gets the same job', async (t) => {
    // a gateway started now has nothing in memory: what it knows of the id is in Redis
    const other = await startService(t, gatewayService, fleet.gatewayEnv)
    const res = await wrapFetchWithPayment(fetch, clientWithId(id))(`${other.url}/agent/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(prompt),
    })
    t.equal(res.status, 202)
    t.same(await res.json(), { jobId: first!.jobId, threadId: first!.threadId, status: 'pending' })
    t.match(JSON.parse(Buffer.from(res.headers.get('payment-response')!, 'base64').toString()), {
      success: true,
      payer: getAddress(fleet.payer.address),
    })
  })

  t.test('the same id with another prompt answers 409 and starts nothing', async (t) => {
    const res = await wrapFetchWithPayment(fetch, clientWithId(id))(`${fleet.gateway.url}/agent/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'What is the price of ARB?' }),
    })
    t.equal(res.status, 409)
    t.same(await res.json(), {
      error: `payment id ${id} was first used with another request (method, path, query or body differ); use a new id for a new request`,
    })
  })

  t.test(
    'a gateway started afterwards (as after a restart: nothing in memory) answers the first signed payment with the same job',
    async (t) => {
      const restarted = await startService(t, gatewayService, fleet.gatewayEnv)
      const res = await post(restarted.url, prompt, header)
      t.equal(res.status, 202)
      t.equal(((await res.json()) as { jobId: string }).jobId, first!.jobId)
    },
  )

  t.test('one job exists; one payment is recorded and settled; the payer paid the price once', async (t) => {
    const jobs = await eventually(
      'the job complete',
      async () => {
        const jobs = await jobsOfPayer()
        return jobs.every((job) => job.status === 'complete') ? jobs : undefined
      },
      30_000,
    )
    t.same(
      jobs.map((job) => job.id),
      [first!.jobId],
      'one job',
    )
    const settled = await eventually(
      'the payment settled',
      async () => {
        const body = await revenue()
        return body.recentPayments.some((p: { settlement: string }) => p.settlement === 'settled') ? body : undefined
      },
      30_000,
    )
    t.equal(settled.recentPayments.length, 1, 'one payment recorded')
    t.match(settled.recentPayments[0], {
      route: 'POST /agent/prompt',
      amount: '10000',
      jobId: first!.jobId,
      settlement: 'settled',
      txHash: /^0x[0-9a-f]{64}$/,
    })
    t.equal(settled.requestCount, 1)
    t.equal(await fleet.balanceOf(fleet.payer.address), before - 10_000n, 'the payer paid 10000 base units, once')
  })
})
