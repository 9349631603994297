import { fileURLToPath } from 'node:url'
import type { Approval } from '@ats/contracts'
import { startService, startServiceProcess } from '@ats/service-kit/testing'
import t from 'tap'
import { agentService } from '../src/service.ts'
import { notSwappedReason } from '../src/runner/approvals.ts'
import { eventually, payerCall, payerHeaders, startStack, waitForJob } from './helpers.ts'

t.test("a swap over the payer's approvalAboveUsd: the job waits for a person", async (top) => {
  // a run-time limit shorter than the waits below: a wait for approval does not count against it
  const stack = await startStack(top, { agentEnv: { APPROVAL_POLL_MS: '200', AGENT_JOB_MAX_RUN_MS: '2000' } })
  const payer = stack.devnet.accounts[1]!.address
  const allow = await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', { label: 'approvals', policy: { maxUsdPerSwap: 100, approvalAboveUsd: 10 } })
  top.equal(allow.status, 200, JSON.stringify(allow.body))
  const call = (path: string, init: { method?: string; body?: unknown } = {}) => stack.call(path, { ...init, headers: payerHeaders(payer) })
  const prompt = async (text: string) => (await call('/agent/prompt', { body: { prompt: text } })).body.jobId as string
  const waiting = (jobId: string) =>
    eventually(`job ${jobId} to wait for approval`, async () => {
      const job = (await call(`/agent/job/${jobId}`)).body
      return job.status === 'awaiting_approval' ? job : undefined
    })

  top.test('the job shows the approval and a notice, its stream stays open; approved, it swaps once and completes', async (t) => {
    const jobId = await prompt('swap 50 USDC for WETH')
    const job = await waiting(jobId)
    t.match(job, {
      status: 'awaiting_approval',
      approval: { id: /^apr_/, status: 'pending', swap: { amountIn: '50000000' }, requestedBy: { jobId }, links: { approve: /\/approve$/ } },
    })
    t.match(
      job.notice,
      new RegExp(`^Approval needed: swap 50 USDC for WETH \\(worth \\$50\\.00, over the \\$10\\.00 approval threshold of payer ${payer}\\)\\. Approve: POST /approvals/${job.approval.id}/approve, or reject: POST /approvals/${job.approval.id}/reject \\(within 1[45] minutes\\)\\.$`, 'i'),
    )

    // the event stream: the waiting status with the approval, and the stream does not end
    const controller = new AbortController()
    const res = await fetch(`${stack.agent!.url}/agent/job/${jobId}/events`, { headers: payerHeaders(payer), signal: controller.signal })
    const reader = res.body!.getReader()
    let text = ''
    while (!text.includes('"awaiting_approval"')) text += new TextDecoder().decode((await reader.read()).value)
    const frame = text.split('\n\n').find((f) => f.includes('"awaiting_approval"'))!
    t.match(JSON.parse(frame.split('\n').find((l) => l.startsWith('data: '))!.slice(6)), { status: 'awaiting_approval', approval: { id: job.approval.id }, notice: job.notice })
    // longer than the job's 2 s run-time limit: it still waits
    await new Promise((resolve) => setTimeout(resolve, 2500))
    t.equal((await call(`/agent/job/${jobId}`)).body.status, 'awaiting_approval', 'the time limit is paused while it waits')
    controller.abort()

    const approved = await stack.decide(job.approval.id, 'approve')
    t.equal(approved.status, 200, JSON.stringify(approved.body))
    const done = await waitForJob(stack.call, payer, jobId)
    t.equal(done.status, 'complete', done.error)
    t.match(done.result.text, /^Swapped 50 USDC for [0-9.]+ WETH on uniswap from the server wallet \(transaction 0x[0-9a-f]{64}/)
    t.equal(done.result.transactions.length, 1)
    t.match(done.result.transactions[0], { status: 'sent', success: true, amountIn: '50000000' })
    t.notOk('approval' in done, 'a finished job shows no approval')
  })

  top.test('rejected: the job completes saying it did not swap, and nothing was sent', async (t) => {
    const jobId = await prompt('swap 50 USDC for WETH')
    const { approval } = await waiting(jobId)
    const nonce = await stack.publicClient.getTransactionCount({ address: stack.serverWallet })
    t.equal((await stack.decide(approval.id, 'reject', { reason: 'not today' })).status, 200)
    const done = await waitForJob(stack.call, payer, jobId)
    t.equal(done.status, 'complete', done.error)
    t.match(done.result.text, new RegExp(`^I did not swap 50 USDC for WETH: approval ${approval.id} was rejected by key_admin: not today`))
    t.same(done.result.transactions, [])
    t.equal(await stack.publicClient.getTransactionCount({ address: stack.serverWallet }), nonce, 'no transaction')
  })

  top.test('cancelled while it waits: the approval is withdrawn and can no longer be approved', async (t) => {
    const jobId = await prompt('swap 50 USDC for WETH')
    const { approval } = await waiting(jobId)
    const cancel = await call(`/agent/job/${jobId}`, { method: 'DELETE' })
    t.same(cancel.body, { success: true, jobId })
    t.equal((await call(`/agent/job/${jobId}`)).body.status, 'cancelled')
    const late = await eventually('the approval to be withdrawn', async () => {
      const res = await stack.decide(approval.id, 'approve')
      return res.status === 409 ? res : undefined
    })
    t.match(late.body.error, /rejected/)
  })
})

t.test('kill -9 of the worker while its job waits: another worker takes the job over, it waits for the same approval, and approved it swaps once', async (t) => {
  const stack = await startStack(t, { noAgent: true })
  const payer = stack.devnet.accounts[1]!.address
  await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', { label: 'approvals', policy: { maxUsdPerSwap: 100, approvalAboveUsd: 10 } })
  const api = await startService(t, agentService, { ...stack.agentEnv, AGENT_ROLE: 'api' })
  const workerEnv = { ...stack.agentEnv, AGENT_ROLE: 'worker', AGENT_ACK_WAIT_MS: '1500', APPROVAL_POLL_MS: '200', LOG_LEVEL: 'warn' }
  const workerEntry = fileURLToPath(new URL('../src/server.ts', import.meta.url))
  const first = await startServiceProcess(t, workerEntry, workerEnv)
  const call = payerCall(api.url, payer)
  const { jobId } = await call('/agent/prompt', { prompt: 'swap 50 USDC for WETH' })
  const waited = await eventually('the job to wait', async () => {
    const job = await call(`/agent/job/${jobId}`)
    return job.status === 'awaiting_approval' ? job : undefined
  })
  const held = await api.ctx.db.job.findUniqueOrThrow({ where: { id: jobId } })
  process.kill(first.pid, 'SIGKILL')

  await startServiceProcess(t, workerEntry, workerEnv)
  const taken = await eventually('another worker to take the job over', async () => {
    const job = await api.ctx.db.job.findUniqueOrThrow({ where: { id: jobId } })
    return job.workerId !== held.workerId && job.status === 'awaiting_approval' ? job : undefined
  })
  t.ok(taken.attempts > held.attempts, `claimed again (${held.attempts} -> ${taken.attempts})`)
  t.equal((taken.approval as { id: string }).id, waited.approval.id, 'the same approval: the execute was answered again')

  const nonce = await stack.publicClient.getTransactionCount({ address: stack.serverWallet })
  t.equal((await stack.decide(waited.approval.id, 'approve')).status, 200)
  const done = await eventually('the job to complete', async () => {
    const job = await call(`/agent/job/${jobId}`)
    return ['complete', 'failed', 'cancelled'].includes(job.status) ? job : undefined
  })
  t.equal(done.status, 'complete', done.error)
  t.match(done.result.text, /^Swapped 50 USDC for [0-9.]+ WETH/)
  const sent = (await stack.publicClient.getTransactionCount({ address: stack.serverWallet })) - nonce
  t.ok(sent >= 1 && sent <= 2, `the swap (and at most its token approval) was sent once: ${sent} transactions`)
  t.equal(done.result.transactions.length, 1)
})

t.test('what a decided approval that did not swap says', async (t) => {
  const base = { id: 'apr_1', createdAt: 0, expiresAt: 900_000, decidedBy: null, error: null, result: null } as unknown as Approval
  t.equal(notSwappedReason({ ...base, status: 'expired' }), 'approval apr_1 expired after 15 minutes without a decision')
  t.equal(notSwappedReason({ ...base, status: 'rejected', decidedBy: 'key_y', decisionReason: 'too big' }), 'approval apr_1 was rejected by key_y: too big')
  t.equal(
    notSwappedReason({ ...base, status: 'approved', decidedBy: 'key_y', error: 'over the daily limit' }),
    'approval apr_1 was approved by key_y, but the swap was not made: over the daily limit',
  )
  t.equal(notSwappedReason({ ...base, status: 'approved', result: {} as Approval['result'] }), null)
})
