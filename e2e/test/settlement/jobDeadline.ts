import t from 'tap'
import { adminKey, eventually, startAgentFleet } from '../fleet.ts'

/**
 * A paid job must end while its payment can still be settled: the gateway forwards the payment's
 * validBefore, and the agent neither starts nor resumes a job after its deadline (validBefore less
 * AGENT_JOB_PAYMENT_MARGIN_SECONDS), caps the wait for an approval at it, and voids the payment
 * with the reason instead of doing the work for free. Short windows here: payments valid for
 * ~14 s, a 4 s margin, and one job at a time (AGENT_WORKER_CONCURRENCY 1) so a job can be made
 * to wait in the queue behind another.
 */
const marginSeconds = 4
t.test('a paid job ends while its payment can still settle', async (t) => {
  const fleet = await startAgentFleet(t, {
    agentEnv: { APPROVAL_POLL_MS: '200', AGENT_WORKER_CONCURRENCY: '1', AGENT_JOB_PAYMENT_MARGIN_SECONDS: String(marginSeconds) },
    gatewayEnv: { JOB_PAYMENT_MIN_VALIDITY_SECONDS: '10', PAYMENT_MIN_VALIDITY_SECONDS: '10' },
  })
  const { request, pay, publicClient, serverWallet } = fleet
  const payer = fleet.payer.address
  const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
  const paid = async (path: string, init: { method?: string; body?: unknown } = {}) =>
    request(path, { ...init, headers: { 'x-payment': await pay() } })
  /** A prompt paid with a payment valid for `validFor` s more, and the deadline its job must end by (ms). */
  async function promptValidFor(prompt: string, validFor: number) {
    const validBefore = Math.floor(Date.now() / 1000) + validFor
    const x402 = await pay({ validBefore: BigInt(validBefore) })
    const accepted = await request('/agent/prompt', { method: 'POST', body: { prompt }, headers: { 'x-payment': x402 } })
    return { accepted, deadline: (validBefore - marginSeconds) * 1000 }
  }
  const jobOf = async (jobId: string) => (await paid(`/agent/job/${jobId}`)).body
  const jobUntil = (jobId: string, until: (job: any) => boolean, ms = 30_000) =>
    eventually(
      `job ${jobId}`,
      async () => {
        const job = await jobOf(jobId)
        return until(job) ? job : undefined
      },
      ms,
    )

  t.before(async () => {
    const allow = await request(`/admin/agent-payers/${payer}`, {
      method: 'PUT',
      key: adminKey,
      body: { label: 'deadlines', policy: { maxUsdPerSwap: 100, approvalAboveUsd: 10 } },
    })
    if (allow.status !== 200) throw new Error(JSON.stringify(allow.body))
  })

  t.test('a paid job whose payment expires while it waits for approval is voided, and nothing is swapped', async (t) => {
    const before = await nonceOf()
    const { accepted, deadline } = await promptValidFor('swap 50 USDC for WETH', 14)
    t.equal(accepted.status, 202, JSON.stringify(accepted.body))
    const { jobId } = accepted.body
    t.equal(accepted.body.deadline, deadline, "the 202 says by when the job must end: validBefore less the agent's margin")

    const waiting = await jobUntil(jobId, (job) => job.status === 'awaiting_approval')
    t.equal(waiting.approval.expiresAt, deadline, "the approval's wait is capped at the payment's deadline")
    t.ok(waiting.approval.expiresAt - waiting.approval.createdAt < 15_000, 'far less than the usual 15 minutes')
    t.equal(waiting.approval.expiresWithPayment, true)
    t.match(waiting.notice, /within \d+ s, before the payment that bought this job can no longer be settled/)

    // the ledger hears of the job's outcome over the payments stream, a moment after the job ends
    const voided = await jobUntil(jobId, (job) => job.status === 'failed' && job.payment?.state !== 'pending', 30_000)
    t.match(
      voided.error,
      /^the job was stopped: the payment that bought it expires at .* \(validBefore\), too soon to settle it after the job/,
    )
    t.notOk(voided.result, 'no answer')
    t.match(voided.payment, { state: 'voided', reason: voided.error })
    const approval = (await request(`/approvals/${waiting.approval.id}`, { key: adminKey })).body
    t.match(approval.status, /^(expired|rejected)$/, 'the approval can no longer be approved')
    t.equal((await request(`/approvals/${waiting.approval.id}/approve`, { method: 'POST', key: adminKey })).status, 409)
    t.equal(await nonceOf(), before, 'nothing was sent')
  })

  t.test('a paid job still queued when its payment deadline passes is voided, not run', async (t) => {
    // the only worker is held by a job waiting for approval (its payment valid for the usual 10 minutes)
    const holder = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'swap 50 USDC for WETH' } })
    const waiting = await jobUntil(holder.body.jobId, (job) => job.status === 'awaiting_approval')

    const { accepted: queued, deadline } = await promptValidFor('what is the price of ETH', 12)
    t.equal(queued.status, 202, JSON.stringify(queued.body))
    const { jobId } = queued.body
    t.equal(queued.body.deadline, deadline)
    await eventually('the queued job to pass its deadline', async () => Date.now() > deadline + 500 || undefined, 20_000)
    t.equal((await jobOf(jobId)).status, 'pending', 'still in the queue behind the waiting job')

    // the worker is freed: it takes the queued job next, after its deadline
    t.equal((await request(`/approvals/${waiting.approval.id}/reject`, { method: 'POST', key: adminKey })).status, 200)
    await jobUntil(holder.body.jobId, (job) => job.status === 'complete')
    const voided = await jobUntil(jobId, (job) => job.status === 'failed' && job.payment?.state !== 'pending')
    t.match(
      voided.error,
      /^the job was not started: the payment that bought it expires at .* \(validBefore\), too soon to settle it after the job/,
    )
    t.notOk(voided.result, 'no answer')
    t.match(voided.payment, { state: 'voided', reason: voided.error })
    const thread = (await paid(`/agent/thread/${voided.threadId}`)).body
    t.same(
      thread.messages.map((m: { role: string }) => m.role),
      ['user'],
      'the agent never answered it',
    )
  })
})
