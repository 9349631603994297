import { gatewayService } from '@ats/gateway/service'
import { startService } from '@ats/service-kit/testing'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions, generatePaymentId, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier'
import { wrapFetchWithPayment, x402Client, x402HTTPClient } from '@x402/fetch'
import t, { type Test } from 'tap'
import { getAddress } from 'viem'
import { adminKey, eventually, startAgentFleet } from '../fleet.ts'

/**
 * Idempotent paid requests, as a client using x402's own packages makes them: a payment id
 * (the payment-identifier extension) sent with paid requests, through gateways sharing Redis,
 * to the agent, with admin settling on the devnet. A repeat (the same request, the same
 * payment) gets the first answer as it was; nothing runs again uncharged.
 */
t.test('idempotent paid requests with a payment id', async (t) => {
  const fleet = await startAgentFleet(t, { adminEnv: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '100' } })
  const network = 'eip155:31337'
  const prompt = { prompt: 'What is the price of ETH?' }

  /** x402's client for the fleet's payer, adding `id` (when there is one) to every payment (x402's documented hook). */
  function clientWithId(id: string | undefined) {
    const client = x402Client.fromConfig({
      schemes: [{ network, client: new ExactEvmScheme(fleet.payer) }],
      spendControls: { allowedAssets: [{ network, asset: fleet.usdc, maxAmountPerPayment: '100000' }] },
    })
    client.onBeforePaymentCreation(async ({ paymentRequired }) => {
      paymentRequired.extensions ??= {}
      if (id !== undefined) appendPaymentIdentifierToExtensions(paymentRequired.extensions, id)
    })
    return client
  }

  const post = (gateway: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${gateway}/agent/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    })

  /** One signed payment with the id, made by x402's client from the 402 of `path` (a GET, or the prompt's POST): its PAYMENT-SIGNATURE header. */
  async function signedPayment(t: Test, id: string | undefined, path = '/agent/prompt') {
    const unpaid = path === '/agent/prompt' ? await post(fleet.gateway.url, prompt) : await fetch(`${fleet.gateway.url}${path}`)
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

  /** The PaymentPayload a PAYMENT-SIGNATURE header carries. */
  const payloadOf = (header: Record<string, string>) =>
    JSON.parse(Buffer.from(header['PAYMENT-SIGNATURE']!, 'base64').toString('utf8')) as {
      payload: { authorization: { nonce: string } }
      extensions?: Record<string, unknown>
    }
  const nonceOf = (header: Record<string, string>) => payloadOf(header).payload.authorization.nonce

  /** A paid GET as a client sends it: the payment headers given, the answer's JSON parsed. */
  const get = (path: string, headers: Record<string, string>) => fleet.request(path, { headers })

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

    t.test('the first payment sent again on another gateway gets the first answer, marked as given again', async (t) => {
      // a gateway started now has nothing in memory: what it knows of the id is in Redis
      const other = await startService(t, gatewayService, fleet.gatewayEnv)
      const res = await post(other.url, prompt, header)
      t.equal(res.status, 202)
      t.same(await res.json(), first, 'the first answer, deadline included')
      t.equal(res.headers.get('idempotent-replayed'), 'true')
      t.equal(res.headers.get('x-ats-job-id'), first!.jobId)
      t.match(JSON.parse(Buffer.from(res.headers.get('payment-response')!, 'base64').toString()), {
        success: true,
        payer: getAddress(fleet.payer.address),
      })
    })

    t.test('a newly signed payment under the id (x402 fetch signs one per call) answers 409 naming the first; nothing runs', async (t) => {
      const res = await wrapFetchWithPayment(fetch, clientWithId(id))(`${fleet.gateway.url}/agent/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(prompt),
      })
      t.equal(res.status, 409)
      t.same(await res.json(), {
        error: `payment id ${id} was first used with another payment (nonce ${nonceOf(header)}): to get its answer again send that same payment again; a new payment needs a new id`,
      })
      t.notOk(res.headers.get('payment-response'), 'refused before the service: nothing charged')
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

  /** A wallet-bound key of the payer: its jobs (and their payments) read without paying. */
  const payerKey = (
    await fleet.request('/admin/keys', {
      method: 'POST',
      key: adminKey,
      body: { tier: 'readonly', label: 'payer reads', wallet: fleet.payer.address },
    })
  ).body.key as string
  type JobOfPayer = { id: string; status: string; payment?: { state: string } }
  const jobOfPayer = async (jobId: string) =>
    ((await fleet.request('/portfolio/jobs?limit=50', { key: payerKey })).body.jobs as JobOfPayer[]).find((job) => job.id === jobId)

  /** A prompt paid the ordinary way (a v1 payment without an id), followed until its job is complete and its payment settled. */
  async function settledPrompt(body: Record<string, unknown>) {
    const started = await fleet.request('/agent/prompt', { method: 'POST', body, headers: { 'x-payment': await fleet.pay() } })
    if (started.status !== 202) throw new Error(`prompt answered ${started.status}: ${JSON.stringify(started.body)}`)
    await eventually(
      `job ${started.body.jobId} complete and paid`,
      async () => ((await jobOfPayer(started.body.jobId))?.payment?.state === 'settled' ? true : undefined),
      30_000,
    )
    return started.body as { jobId: string; threadId: string }
  }

  t.test('GET /agent/job/:id repeated with its payment id answers the state it first answered, not the state now', async (t) => {
    const started = await fleet.request('/agent/prompt', { method: 'POST', body: prompt, headers: { 'x-payment': await fleet.pay() } })
    const { jobId } = started.body as { jobId: string }
    const header = await signedPayment(t, generatePaymentId(), `/agent/job/${jobId}`)
    const first = await get(`/agent/job/${jobId}`, header)
    t.equal(first.status, 200)
    t.not(first.body.payment?.state, 'settled', 'read before the job was complete and its payment settled')

    await eventually(
      'the job complete and paid',
      async () => ((await jobOfPayer(jobId))?.payment?.state === 'settled' ? true : undefined),
      30_000,
    )
    const fresh = await get(`/agent/job/${jobId}`, { 'x-payment': await fleet.pay() })
    t.match(fresh.body, { status: 'complete', payment: { state: 'settled' } }, 'a new payment reads the job as it is now')

    const again = await get(`/agent/job/${jobId}`, header)
    t.equal(again.status, 200)
    t.same(again.body, first.body, 'the repeat gets the first answer, byte for byte')
    t.equal(again.headers.get('idempotent-replayed'), 'true')
    t.equal(again.headers.get('payment-response'), first.headers.get('payment-response'), "with the first answer's payment response")
  })

  t.test('GET /agent/thread/:id repeated with its payment id after the thread grew answers the first two messages', async (t) => {
    const { threadId } = await settledPrompt(prompt)
    const header = await signedPayment(t, generatePaymentId(), `/agent/thread/${threadId}`)
    const first = await get(`/agent/thread/${threadId}`, header)
    t.equal(first.status, 200)
    t.equal(first.body.messages.length, 2)
    await settledPrompt({ prompt: 'and GMX?', threadId })
    const again = await get(`/agent/thread/${threadId}`, header)
    t.same(again.body, first.body, 'still the first two messages')
    t.equal((await get(`/agent/thread/${threadId}`, { 'x-payment': await fleet.pay() })).body.messages.length, 4, 'the thread now has four')
  })

  t.test('a new authorization under a used payment id is refused (409) on any route; its nonce stays unused', async (t) => {
    const id = generatePaymentId()
    const first = await signedPayment(t, id, '/agent/skills')
    t.equal((await get('/agent/skills', first)).status, 200)
    // what the issue saw: after the first authorization, the payer signs a new nonce under the same id
    const second = await signedPayment(t, id, '/agent/skills')
    const refused = await get('/agent/skills', second)
    t.equal(refused.status, 409)
    t.equal(
      refused.body.error,
      `payment id ${id} was first used with another payment (nonce ${nonceOf(first)}): to get its answer again send that same payment again; a new payment needs a new id`,
    )
    t.notOk(refused.headers.get('payment-response'), 'nothing charged')
    // the extensions are not signed: the same authorization without the id is a new payment, its nonce unused
    const { extensions: _id, ...withoutId } = payloadOf(second)
    const unused = await get('/agent/skills', { 'PAYMENT-SIGNATURE': Buffer.from(JSON.stringify(withoutId)).toString('base64') })
    t.equal(unused.status, 200, 'the refused authorization pays for a request of its own')
  })

  t.test('a payment made for one resource is refused (402 naming both) on another route, and stays good for its own', async (t) => {
    const { jobId } = await settledPrompt(prompt)
    const forSkills = await signedPayment(t, undefined, '/agent/skills')
    const elsewhere = await get(`/agent/job/${jobId}`, forSkills)
    t.equal(elsewhere.status, 402)
    t.match(
      elsewhere.body.error,
      /^wrong resource: the payment was made for http:\/\/localhost:\d+\/agent\/skills, not for GET http:\/\/localhost:\d+\/agent\/job\/job_/,
    )
    const required = JSON.parse(Buffer.from(elsewhere.headers.get('payment-required')!, 'base64').toString('utf8'))
    t.match(
      required,
      { error: /^wrong resource/, resource: { url: new RegExp(`/agent/job/${jobId}$`) } },
      'the 402 names what to pay for instead',
    )
    const own = await get('/agent/skills', forSkills)
    t.equal(own.status, 200, 'refused before its nonce was claimed: it still pays for the skills')
  })

  t.test('a stream is not kept: GET /agent/job/:id/events with a payment id streams once, its repeat answers 409', async (t) => {
    const { jobId } = await settledPrompt(prompt)
    const id = generatePaymentId()
    const header = await signedPayment(t, id, `/agent/job/${jobId}/events`)
    const events = (headers: Record<string, string>) =>
      fetch(`${fleet.gateway.url}/agent/job/${jobId}/events`, { headers: { ...headers, accept: 'text/event-stream' } })
    const first = await events(header)
    t.equal(first.status, 200)
    t.match(await first.text(), /event: status[\s\S]*"status":"complete"/, "the job's events, to its end")
    const again = await events(header)
    t.equal(again.status, 409)
    t.same(await again.json(), {
      error: `payment id ${id}: its answer was given once and not kept (a stream of events is not kept), so it is not given again; a new payment with a new id asks again`,
    })
  })
})
