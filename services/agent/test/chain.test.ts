import { fileURLToPath } from 'node:url'
import { type Approval, natsChannels } from '@ats/contracts'
import pino from 'pino'
import { createDatabase, startService, startServiceProcess } from '@ats/service-kit/testing'
import { connect } from 'nats'
import t from 'tap'
import { type Address, getAddress } from 'viem'
import { createJobStore } from '../src/jobs/store.ts'
import { notSwappedReason } from '../src/runner/approvals.ts'
import { createToolbox } from '../src/runner/toolbox.ts'
import { createTools } from '../src/runner/tools.ts'
import { agentService } from '../src/service.ts'
import { eventually, payerCall, payerHeaders, startStack, waitForJob } from './helpers.ts'

// The agent's swaps on the file's devnet: waits for approval, a worker killed mid-swap, steps
// replayed by content. One devnet for the file (helpers.ts); each test starts its own services.

const workerEntry = fileURLToPath(new URL('../src/server.ts', import.meta.url))

t.test("a swap over the payer's approvalAboveUsd: the job waits for a person", async (top) => {
  // a run-time limit shorter than the waits below: a wait for approval does not count against it
  const stack = await startStack(top, { agentEnv: { APPROVAL_POLL_MS: '200', AGENT_JOB_MAX_RUN_MS: '2000' } })
  const payer = stack.devnet.accounts[1]!.address
  const allow = await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', {
    label: 'approvals',
    policy: { maxUsdPerSwap: 100, approvalAboveUsd: 10 },
  })
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
      approval: {
        id: /^apr_/,
        status: 'pending',
        swap: { amountIn: '50000000' },
        requestedBy: { jobId },
        links: { approve: /\/approve$/ },
      },
    })
    t.match(
      job.notice,
      new RegExp(
        `^Approval needed: swap 50 USDC for WETH \\(worth \\$50\\.00, over the \\$10\\.00 approval threshold of payer ${payer}\\)\\. A person decides it \\(an admin key, a key bound to wallet ${payer}, or a key the policy names in approvers\\): approve with POST /approvals/${job.approval.id}/approve, or reject with POST /approvals/${job.approval.id}/reject \\(or open /console/#/approvals/${job.approval.id} in the web console\\), within 1[45] minutes\\.$`,
        'i',
      ),
    )

    // the event stream: the waiting status with the approval, and the stream does not end
    const controller = new AbortController()
    const res = await fetch(`${stack.agent!.url}/agent/job/${jobId}/events`, { headers: payerHeaders(payer), signal: controller.signal })
    const reader = res.body!.getReader()
    let text = ''
    while (!text.includes('"awaiting_approval"')) text += new TextDecoder().decode((await reader.read()).value)
    const frame = text.split('\n\n').find((f) => f.includes('"awaiting_approval"'))!
    t.match(
      JSON.parse(
        frame
          .split('\n')
          .find((l) => l.startsWith('data: '))!
          .slice(6),
      ),
      { status: 'awaiting_approval', approval: { id: job.approval.id }, notice: job.notice },
    )
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

t.test(
  'kill -9 of the worker while its job waits: another worker takes the job over, it waits for the same approval, and approved it swaps once',
  async (t) => {
    const workerEnv = (agentEnv: NodeJS.ProcessEnv) => ({
      ...agentEnv,
      AGENT_ROLE: 'worker',
      AGENT_ACK_WAIT_MS: '1500',
      APPROVAL_POLL_MS: '200',
      LOG_LEVEL: 'warn',
    })
    // the first worker process loads while the services start
    const stack = await startStack(t, { noAgent: true, alongside: (agentEnv) => startServiceProcess(t, workerEntry, workerEnv(agentEnv)) })
    const first = stack.alongside
    const payer = stack.devnet.accounts[1]!.address
    await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', {
      label: 'approvals',
      policy: { maxUsdPerSwap: 100, approvalAboveUsd: 10 },
    })
    const api = await startService(t, agentService, { ...stack.agentEnv, AGENT_ROLE: 'api' })
    const call = payerCall(api.url, payer)
    const { jobId } = await call('/agent/prompt', { prompt: 'swap 50 USDC for WETH' })
    const waited = await eventually('the job to wait', async () => {
      const job = await call(`/agent/job/${jobId}`)
      return job.status === 'awaiting_approval' ? job : undefined
    })
    const held = await api.ctx.db.job.findUniqueOrThrow({ where: { id: jobId } })
    process.kill(first.pid, 'SIGKILL')

    await startServiceProcess(t, workerEntry, workerEnv(stack.agentEnv))
    // the message comes back after the ack wait, then the new worker replays the job's steps up to the swap: under a loaded CI, more than 10 s
    const taken = await eventually(
      'another worker to take the job over',
      async () => {
        const job = await api.ctx.db.job.findUniqueOrThrow({ where: { id: jobId } })
        return job.workerId !== held.workerId && job.status === 'awaiting_approval' ? job : undefined
      },
      30_000,
    )
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
  },
)

t.test('what a decided approval that did not swap says', async (t) => {
  const base = { id: 'apr_1', createdAt: 0, expiresAt: 900_000, decidedBy: null, error: null, result: null } as unknown as Approval
  t.equal(notSwappedReason({ ...base, status: 'expired' }), 'approval apr_1 expired after 15 minutes without a decision')
  t.equal(
    notSwappedReason({ ...base, status: 'rejected', decidedBy: 'key_y', decisionReason: 'too big' }),
    'approval apr_1 was rejected by key_y: too big',
  )
  t.equal(
    notSwappedReason({ ...base, status: 'approved', decidedBy: 'key_y', error: 'over the daily limit' }),
    'approval apr_1 was approved by key_y, but the swap was not made: over the daily limit',
  )
  t.equal(notSwappedReason({ ...base, status: 'approved', result: {} as Approval['result'] }), null)
})

t.test('kill -9 of the worker mid-swap: the job completes once, with one swap on chain', async (t) => {
  const workerEnv = (agentEnv: NodeJS.ProcessEnv) => ({ ...agentEnv, AGENT_ROLE: 'worker', AGENT_ACK_WAIT_MS: '1500', LOG_LEVEL: 'warn' })
  // the first worker process loads while the services start
  const stack = await startStack(t, { noAgent: true, alongside: (agentEnv) => startServiceProcess(t, workerEntry, workerEnv(agentEnv)) })
  const { devnet, publicClient, serverWallet } = stack
  const rpc = async (method: string, params: unknown[] = []) => {
    const res = await fetch(devnet.rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
    })
    return ((await res.json()) as { result: unknown }).result
  }
  const payer = devnet.accounts[1]!.address
  const allow = await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', { label: 'fault test', policy: { maxUsdPerSwap: 100 } })
  t.equal(allow.status, 200, JSON.stringify(allow.body))

  const api = await startService(t, agentService, { ...stack.agentEnv, AGENT_ROLE: 'api' })
  const firstWorker = stack.alongside
  const call = payerCall(api.url, payer)

  // blocks are mined only when the test says so: the swap waits in the mempool while the worker dies
  // cacheTime 0: viem otherwise answers a block number up to its polling interval old
  const startBlock = await publicClient.getBlockNumber({ cacheTime: 0 })
  await rpc('evm_setAutomine', [false])
  const { jobId } = await call('/agent/prompt', { prompt: 'swap 1 USDC for ARB' })
  await eventually('the swap to reach the mempool', async () => {
    const status = (await rpc('txpool_status')) as { pending: string }
    return Number(status.pending) > 0 ? true : undefined
  })
  process.kill(firstWorker.pid, 'SIGKILL')
  t.equal((await call(`/agent/job/${jobId}`)).status, 'running')

  await startServiceProcess(t, workerEntry, workerEnv(stack.agentEnv))
  await rpc('evm_setAutomine', [true])
  await rpc('evm_mine')
  const job = await eventually(
    'the job to finish',
    async () => {
      const current = await call(`/agent/job/${jobId}`)
      return ['complete', 'failed', 'cancelled'].includes(current.status) ? current : undefined
    },
    30_000,
  )
  t.equal(job.status, 'complete', job.error)
  t.same(job.result.toolCalls, ['swap'])
  t.equal(job.result.transactions.length, 1)
  const [sent] = job.result.transactions
  t.match(sent, { status: 'sent', kind: 'swap', success: true, tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000', step: 1 })

  // every transaction the server wallet sent since: approvals aside, exactly one swap, the job's
  const latest = await publicClient.getBlockNumber({ cacheTime: 0 })
  const router = getAddress(devnet.book.uniswapV3.swapRouter02 as Address)
  const swaps: string[] = []
  for (let n = startBlock + 1n; n <= latest; n++) {
    const block = await publicClient.getBlock({ blockNumber: n, includeTransactions: true })
    for (const tx of block.transactions) {
      if (getAddress(tx.from) === getAddress(serverWallet) && tx.to && getAddress(tx.to) === router) swaps.push(tx.hash)
    }
  }
  t.same(swaps, [sent.hash], 'one swap on chain')

  const events = await fetch(`${api.url}/agent/job/${jobId}/events`, { headers: payerHeaders(payer) }).then((res) => res.text())
  t.match(events, /"status":"complete"/)
  t.equal(events.match(/"status":"complete"/g)?.length, 1, 'completed once')
})

// A job taken over after its worker died runs its steps again through the toolbox. A step is
// matched by content (tool + arguments): the same step replays the earlier run's swap, a
// different step n (a re-run that planned differently) is a new swap with its own key.
t.test('a re-run whose step n differs swaps anew; the same step replayed swaps once', async (t) => {
  // API only: the job stays pending, and the test plays its workers' runs through the toolbox
  const stack = await startStack(t, { agentEnv: { AGENT_ROLE: 'api' } })
  const { env, publicClient, serverWallet } = stack
  const payer = stack.devnet.accounts[1]!.address
  const allow = await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', { label: 'step key test', policy: { maxUsdPerSwap: 100 } })
  t.equal(allow.status, 200, JSON.stringify(allow.body))
  const accepted = await stack.call('/agent/prompt', { body: { prompt: 'swap 1 USDC for ARB' }, headers: payerHeaders(payer) })
  t.equal(accepted.status, 202, JSON.stringify(accepted.body))
  const jobId = accepted.body.jobId as string

  const db = createDatabase(env.DATABASE_URL!, agentService.database!)
  t.teardown(() => db.$disconnect())
  const nc = await connect({ servers: env.NATS_URL! })
  t.teardown(() => nc.drain())
  const store = createJobStore(db)
  const tools = createTools({ nc, channels: natsChannels(env.NATS_NAMESPACE!), timeoutMs: 10_000, swapTimeoutMs: 60_000 })
  const log = pino({ level: 'silent' })
  /** one worker's run of the job: its step 1 is this swap */
  const run = async (args: Record<string, string>) => {
    const toolbox = await createToolbox({
      tools,
      store,
      emit: () => {},
      log,
      jobId,
      owner: { kind: 'payer', address: payer },
      signal: new AbortController().signal,
    })
    const outcome = await toolbox.call('swap', args)
    if (!outcome.ok) throw new Error(`the swap step failed: ${outcome.error}`)
    return outcome.output as { mode: string; hash: string; amountIn: string }
  }
  /** the worker died after its swap, before it recorded step 1 as finished */
  const diedBeforeFinishing = () => db.jobStep.updateMany({ where: { jobId, step: 1 }, data: { finishedAt: null } })
  const sentByWallet = () => publicClient.getTransactionCount({ address: serverWallet, blockTag: 'latest' })

  const first = await run({ tokenIn: 'USDC', tokenOut: 'ARB', amount: '2' })
  t.match(first, { mode: 'executed', amountIn: '2000000' })
  await diedBeforeFinishing()

  // the next run plans differently (a language model need not plan the same twice): step 1 is another swap
  const second = await run({ tokenIn: 'USDC', tokenOut: 'ARB', amount: '1' })
  t.match(second, { mode: 'executed', amountIn: '1000000' }, "the new swap ran, not the earlier run's result")
  t.not(second.hash, first.hash, 'a new transaction')
  await diedBeforeFinishing()

  // the same step again (arguments in another order): trading hands back the swap it made, nothing is sent
  const before = await sentByWallet()
  const third = await run({ amount: '1', tokenOut: 'ARB', tokenIn: 'USDC' })
  t.equal(third.hash, second.hash, 'the same swap replayed')
  t.equal(await sentByWallet(), before, 'no transaction sent')

  // finished this time: a run that takes the job over reuses the step's output without asking trading
  const fourth = await run({ tokenIn: 'USDC', amount: '1', tokenOut: 'ARB' })
  t.equal(fourth.hash, second.hash)
  t.equal(await sentByWallet(), before, 'no transaction sent')
  const steps = await store.stepsOf(jobId)
  t.equal(steps.length, 1)
  t.match(steps[0]!.input, { amount: '1' })
})
