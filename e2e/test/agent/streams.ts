import t, { type Test } from 'tap'
import { privateKeyToAccount } from 'viem/accounts'
import { eventually, startAgentFleet } from '../fleet.ts'

/**
 * Event streams through the gateway, paid: every stream ends with its job, and a payer holds at
 * most AGENT_MAX_STREAMS_PER_OWNER at once. The agent runs no worker, so jobs stay pending until
 * cancelled and their streams stay open.
 */
t.test('paid event streams: each ends with its job, a payer holds a few at once', async (t) => {
  const fleet = await startAgentFleet(t, { agentEnv: { AGENT_ROLE: 'api', AGENT_MAX_STREAMS_PER_OWNER: '2' } })
  const { request, pay, devnet, createKey } = fleet
  const otherPayer = privateKeyToAccount(devnet.accounts[2]!.privateKey)
  const paid = async (path: string, init: { method?: string; body?: unknown; other?: boolean } = {}) =>
    request(path, { ...init, headers: { 'x-payment': await pay(init.other ? { payer: otherPayer } : {}) } })
  const newJob = async (t: Test, other = false) => {
    const accepted = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'price of ETH' }, other })
    t.equal(accepted.status, 202, JSON.stringify(accepted.body))
    return accepted.body.jobId as string
  }
  const open = async (jobId: string, headers: Record<string, string> = {}, other = false) => {
    const controller = new AbortController()
    const res = await fetch(`${fleet.gateway.url}/agent/job/${jobId}/events`, {
      headers: { 'x-payment': await pay(other ? { payer: otherPayer } : {}), ...headers },
      signal: controller.signal,
    })
    return { res, close: () => controller.abort() }
  }
  /** the stream's whole text: it must end on its own within a few seconds */
  const ends = (res: Response) =>
    Promise.race([
      res.text(),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the stream is still open after 5 s')), 5_000).unref()),
    ])

  t.test('Last-Event-ID beyond the last event: the stream ends when the job does, and at once on a finished job', async (t) => {
    const jobId = await newJob(t)
    const { res } = await open(jobId, { 'last-event-id': '999' })
    t.equal(res.status, 200)
    const cancelled = await paid(`/agent/job/${jobId}`, { method: 'DELETE' })
    t.equal(cancelled.status, 200, JSON.stringify(cancelled.body))
    t.notMatch(await ends(res), /event: status/, 'nothing after 999 to send, and the end')

    const again = await open(jobId, { 'last-event-id': '999' })
    t.equal(again.res.status, 200)
    t.notMatch(await ends(again.res), /event: status/)
    const fromOne = await open(jobId, { 'last-event-id': '1' })
    t.match(await ends(fromOne.res), /"status":"cancelled"/, 'what remains after the id, then the end')

    const bad = await open(jobId, { 'last-event-id': 'soon' })
    t.equal(bad.res.status, 400)
    t.match(((await bad.res.json()) as { error: string }).error, /last-event-id/)
  })

  t.test('at most AGENT_MAX_STREAMS_PER_OWNER open streams per payer: one more is 429, uncharged', async (t) => {
    const jobId = await newJob(t)
    const first = await open(jobId)
    const second = await open(jobId)
    t.same([first.res.status, second.res.status], [200, 200])
    const third = await open(jobId)
    t.equal(third.res.status, 429)
    t.match(((await third.res.json()) as { error: string }).error, /at most 2 .*AGENT_MAX_STREAMS_PER_OWNER/)
    const response = JSON.parse(Buffer.from(third.res.headers.get('x-payment-response') ?? '', 'base64').toString())
    t.match(response, { success: false, errorReason: /not charged: the service answered 429/ }, 'not charged')

    // another payer has slots of their own
    const other = await open(await newJob(t, true), {}, true)
    t.equal(other.res.status, 200)
    other.close()

    // a closed stream frees its slot
    first.close()
    const fourth = await eventually('a slot to free', async () => {
      const next = await open(jobId)
      if (next.res.status === 200) return next
      await next.res.body?.cancel()
      return undefined
    })
    t.equal(fourth.res.status, 200)
    second.close()
    fourth.close()
  })

  t.test("/v1 streaming completions count against the key the same way; the refusal is in OpenAI's shape", async (t) => {
    const { key } = await createKey('readwrite', 'streams')
    const chat = async () => {
      const controller = new AbortController()
      const res = await fetch(`${fleet.gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'ats-planner', messages: [{ role: 'user', content: 'price of ETH' }], stream: true }),
        signal: controller.signal,
      })
      return { res, close: () => controller.abort() }
    }
    const open = [await chat(), await chat()]
    t.same(
      open.map((c) => c.res.status),
      [200, 200],
    )
    const third = await chat()
    t.equal(third.res.status, 429)
    t.match(await third.res.json(), { error: { message: /at most 2 .*AGENT_MAX_STREAMS_PER_OWNER/ } })
    for (const c of open) c.close()
  })
})
