// Three automation replicas (one in this process, two as processes of their own) on one stack:
// devnet, admin and trading. Started once for both tests, which run one after the other on
// wallets and keys of their own: the schedulers run every due run exactly once, and runs over
// a key's approvalAboveUsd wait for a person's decision (approve, reject, pause, delete, expiry).
import pg from 'pg'
import t from 'tap'
import { getAddress, type Address } from 'viem'
import { eventually, keyHeaders, startAutomationStack } from './helpers.ts'

// approvals expire this long after they are asked for: long enough for the decided ones
// (each within about three seconds), short so the test of an expiry waits little
const ttlMs = 7_000
// the schedulers ask trading every 200 ms whether a waiting run's approval was decided
const stack = await startAutomationStack(t, {
  schedulers: 3,
  env: { APPROVAL_POLL_MS: '200' },
  tradingEnv: { APPROVAL_TTL_MS: String(ttlMs) },
})

t.test('three scheduler processes at once: every due run executed exactly once, counted on chain', async (t) => {
  const { devnet, publicClient, call } = stack
  const wallet = getAddress(devnet.accounts[5]!.address) as Address
  const keyId = await stack.createKey(wallet)
  const before = await stack.balanceOf('ARB', wallet)
  const startBlock = await publicClient.getBlockNumber({ cacheTime: 0 })

  // three recurring buys of 1 USDC each, every second, four runs each; made through different replicas
  const ids: string[] = []
  for (let i = 0; i < 3; i++) {
    const created = await call('/automations', {
      via: i,
      headers: keyHeaders(keyId),
      body: {
        walletAddress: wallet,
        type: 'recurring-buy',
        name: `dca ${i}`,
        config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1s', maxRuns: 4 },
      },
    })
    t.equal(created.status, 201, JSON.stringify(created.body))
    t.match(created.body.automation, {
      status: 'active',
      walletAddress: wallet,
      type: 'recurring-buy',
      runs: 0,
      config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1s', maxRuns: 4, slippageBps: 50 },
    })
    ids.push(created.body.automation.id)
  }
  for (const id of ids) {
    const done = await eventually(
      `automation ${id} to complete`,
      async () => {
        const res = await call(`/automations/${id}`, { headers: keyHeaders(keyId) })
        return res.body.automation.status === 'active' ? undefined : res.body.automation
      },
      60_000,
    )
    t.match(done, { status: 'completed', runs: 4, nextRunAt: null, statusReason: 'it made its 4 runs (maxRuns)' })
  }

  const resume = await call(`/automations/${ids[0]}`, { method: 'PATCH', headers: keyHeaders(keyId), body: { status: 'active' } })
  t.equal(resume.status, 400, 'a completed recurring buy is not resumed past its maxRuns')
  t.match(resume.body.error, /cannot be resumed: it made its 4 runs \(maxRuns\)/)

  const runs = (await Promise.all(ids.map((id) => call(`/automations/${id}/runs`, { headers: keyHeaders(keyId) })))).flatMap(
    (r) => r.body.runs,
  )
  t.equal(runs.length, 12, 'four runs each, no more')
  t.ok(
    runs.every((r: any) => r.status === 'success' && /^0x[0-9a-f]{64}$/.test(r.txHash) && BigInt(r.amountOut) > 0n),
    'every run mined',
  )
  const onChain = await stack.swapsSince(startBlock)
  t.same([...onChain].sort(), runs.map((r: any) => r.txHash).sort(), 'one swap on chain per run: none doubled by the three schedulers')
  const after = await stack.balanceOf('ARB', wallet)
  const bought = runs.reduce((sum: bigint, r: any) => sum + BigInt(r.amountOut), 0n)
  t.equal(after - before, bought, "the wallet's ARB grew by what the runs bought")
})

t.test('runs over the key approvalAboveUsd wait for a person (three replicas): approve, reject, pause, delete, expiry', async (top) => {
  const { devnet, publicClient, call } = stack
  const wallet = getAddress(devnet.accounts[7]!.address) as Address
  // the key decides its own runs' approvals here (selfApprove; by default the key that asked cannot approve)
  const keyId = await stack.createKey(wallet, { approvalAboveUsd: 10, selfApprove: true })
  const startBlock = await publicClient.getBlockNumber({ cacheTime: 0 })
  const db = new pg.Client({ connectionString: stack.env.DATABASE_URL, options: '-c search_path=automation' })
  await db.connect()
  top.teardown(() => db.end())

  const get = async (id: string) => (await call(`/automations/${id}`, { headers: keyHeaders(keyId) })).body.automation
  const runsOf = async (id: string) => (await call(`/automations/${id}/runs`, { headers: keyHeaders(keyId) })).body.runs as any[]
  // 20 USDC a second: over the $10 threshold, so every run asks
  const create = async (name: string, extra: Record<string, unknown> = {}) => {
    const config = { tokenIn: 'USDC', tokenOut: 'ARB', amount: '20000000', interval: '1s', ...extra }
    const res = await call('/automations', {
      headers: keyHeaders(keyId),
      body: { walletAddress: wallet, type: 'recurring-buy', name, config },
    })
    if (res.status !== 201) throw new Error(JSON.stringify(res.body))
    return res.body.automation.id as string
  }
  /** The run of `id` that waits now (the newest), once it does. */
  const waiting = (id: string) =>
    eventually(
      `a run of ${id} waiting for approval`,
      async () => {
        const [run] = await runsOf(id)
        return run?.status === 'awaiting_approval' ? run : undefined
      },
      30_000,
    )
  const ended = (id: string, runId: string) =>
    eventually(
      `run ${runId} to end`,
      async () => {
        const run = (await runsOf(id)).find((r) => r.id === runId)
        return run && run.status !== 'awaiting_approval' ? run : undefined
      },
      30_000,
    )
  /** A decision through trading's routes, as the gateway forwards one of this key. */
  const decide = async (approvalId: string, decision: 'approve' | 'reject' | '', body?: unknown) => {
    const res = await fetch(`${stack.tradingUrl}/approvals/${approvalId}${decision ? `/${decision}` : ''}`, {
      method: decision ? 'POST' : 'GET',
      headers: { ...keyHeaders(keyId, wallet), ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  const eventsOf = async (automationId: string) =>
    (await db.query(`SELECT type, owner, data FROM event_outbox WHERE data->>'automationId' = $1 ORDER BY created_at`, [automationId])).rows

  // made first: its approval expires while the others are decided
  const expiring = await create('expiring')

  top.test('a run waits with its approval shown, and no other run of the automation starts meanwhile', async (t) => {
    const id = await create('dca', { maxRuns: 2 })
    const run = await waiting(id)
    t.match(run, { status: 'awaiting_approval', txHash: null, finishedAt: null, approval: { id: /^apr_/, expiresAt: Number } })
    t.equal(run.approval.url, `/approvals/${run.approval.id}`)
    const seen = await decide(run.approval.id, '')
    t.match(seen.body, { status: 'pending', swap: { amountIn: '20000000' }, requestedBy: { keyId, automationRunId: run.id } })
    await new Promise((resolve) => setTimeout(resolve, 2000))
    t.equal((await runsOf(id)).length, 1, 'one run in two seconds of a 1s interval: the waiting run holds the next')

    t.test('approved: the run succeeds with the tx hash, once, and counts as a run', async (t) => {
      const approved = await decide(run.approval.id, 'approve')
      t.equal(approved.status, 200, JSON.stringify(approved.body))
      const done = await ended(id, run.id)
      t.match(done, { status: 'success', txHash: /^0x[0-9a-f]{64}$/, approval: { id: run.approval.id } })
      t.ok(BigInt(done.amountOut) > 0n)
      t.equal((await get(id)).runs, 1)
      const events = (await eventsOf(id)).filter((e) => e.data.runId === run.id)
      t.same(events, [
        {
          type: 'automation.run.succeeded',
          owner: { keyId, wallet: wallet.toLowerCase() },
          data: { automationId: id, runId: run.id, status: 'success', txHash: done.txHash },
        },
      ])
      await eventually(
        'the events published to the stream',
        async () => {
          const { rows } = await db.query(
            `SELECT count(*)::int AS n FROM event_outbox WHERE published_at IS NULL AND data->>'automationId' = $1`,
            [id],
          )
          return rows[0].n === 0 ? true : undefined
        },
        10_000,
      )
    })

    t.test('rejected: the next run ends skipped without a swap, and does not count', async (t) => {
      const next = await waiting(id)
      t.not(next.id, run.id)
      const rejected = await decide(next.approval.id, 'reject', { reason: 'not today' })
      t.equal(rejected.status, 200, JSON.stringify(rejected.body))
      const done = await ended(id, next.id)
      t.match(done, { status: 'skipped', txHash: null, amountOut: null })
      t.equal(done.error, `not swapped: approval ${next.approval.id} was rejected by ${keyId}: not today`)
      t.equal((await get(id)).runs, 1)
      const [event] = (await eventsOf(id)).filter((e) => e.data.runId === next.id)
      t.match(event, { type: 'automation.run.failed', data: { status: 'skipped', error: done.error } })
    })

    t.test('the run that reaches maxRuns completes the automation, announced once', async (t) => {
      const last = await waiting(id)
      t.equal((await decide(last.approval.id, 'approve')).status, 200)
      t.match(await ended(id, last.id), { status: 'success' })
      t.match(await get(id), { status: 'completed', runs: 2, statusReason: 'it made its 2 runs (maxRuns)' })
      const completed = (await eventsOf(id)).filter((e) => e.type === 'automation.completed')
      t.same(completed, [
        {
          type: 'automation.completed',
          owner: { keyId, wallet: wallet.toLowerCase() },
          data: { automationId: id, status: 'completed', statusReason: 'it made its 2 runs (maxRuns)' },
        },
      ])
      const runs = await runsOf(id)
      t.same(
        (await stack.swapsSince(startBlock)).sort(),
        runs
          .filter((r) => r.status === 'success')
          .map((r) => r.txHash)
          .sort(),
        'the two approved runs are the only swaps: nothing was sent for the rejected one or for the other automations',
      )
    })
  })

  top.test('pausing an automation whose run waits withdraws the approval; the run ends saying so', async (t) => {
    const id = await create('paused')
    const run = await waiting(id)
    t.equal((await call(`/automations/${id}`, { method: 'PATCH', headers: keyHeaders(keyId), body: { status: 'paused' } })).status, 200)
    const done = await ended(id, run.id)
    t.match(done, { status: 'skipped', txHash: null, error: `not swapped: automation paused while approval ${run.approval.id} waited` })
    t.match((await decide(run.approval.id, '')).body, { status: 'rejected', decidedBy: 'requester' })
    t.equal((await decide(run.approval.id, 'approve')).status, 409, 'a withdrawn approval cannot be approved')
  })

  top.test('deleting an automation whose run waits withdraws the approval', async (t) => {
    const id = await create('deleted')
    const run = await waiting(id)
    const res = await call(`/automations/${id}`, { method: 'DELETE', headers: keyHeaders(keyId) })
    t.equal(res.status, 200, JSON.stringify(res.body))
    t.match((await decide(run.approval.id, '')).body, { status: 'rejected', decidedBy: 'requester' })
  })

  top.test('an approval nobody decides expires: the run is skipped, saying so', async (t) => {
    // its first run, waiting since the start (or already expired)
    const run = await eventually('the first run', async () => (await runsOf(expiring)).at(-1), 10_000)
    t.match(run.approval, { id: /^apr_/ })
    const done = await eventually(
      'the expiry',
      async () => {
        const found = (await runsOf(expiring)).find((r) => r.id === run.id)
        return found.status === 'awaiting_approval' ? undefined : found
      },
      ttlMs + 30_000,
    )
    t.match(done, {
      status: 'skipped',
      txHash: null,
      error: `not swapped: approval ${run.approval.id} expired after ${ttlMs / 1000} seconds`,
    })
    await call(`/automations/${expiring}`, { method: 'PATCH', headers: keyHeaders(keyId), body: { status: 'paused' } })
  })
})
