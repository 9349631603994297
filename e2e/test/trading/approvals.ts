import t from 'tap'
import { adminKey, eventually, startTradingFleet } from '../fleet.ts'

/**
 * Through the gateway: a swap over its key's approvalAboveUsd waits for a person other than the
 * key that asked (an admin key, a key its policy names in approvers; the key itself only with
 * selfApprove); approved it is mined once, rejected or expired nothing is sent. Approvals expire
 * after 4 s here (the expiry test waits that long; the others decide within a second).
 */
const ttlMs = 4000
t.test("a swap over its key's approval threshold waits for another person", async (t) => {
  const fleet = await startTradingFleet(t, { tradingEnv: { APPROVAL_TTL_MS: String(ttlMs) } })
  const { request, publicClient, serverWallet } = fleet
  const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
  const fiftyUsdc = { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000' }

  /** A readwrite key whose spend policy holds swaps over $10 for approval. */
  const approvalKey = () => fleet.createKey('readwrite', 'approvals', { approvalAboveUsd: 10 })
  const executionsOf = async (key: string) => (await request('/swap/executions', { key })).body.executions as { id: string; hash: string }[]

  /** A $50 swap of a fresh key (with the approval policy, or `policy`), held: 202 with the pending approval. */
  async function held(policy?: Record<string, unknown>) {
    const owner = policy ? await fleet.createKey('readwrite', 'approvals', policy) : await approvalKey()
    const res = await request('/swap/execute', { method: 'POST', key: owner.key, body: fiftyUsdc })
    if (res.status !== 202) throw new Error(`expected 202, got ${res.status} ${JSON.stringify(res.body)}`)
    return { ...owner, approval: res.body.approval as { id: string; links: { approve: string; reject: string; self: string } }, res }
  }

  // the server wallet's router allowance is set once, so each swap later is one transaction
  t.before(async () => {
    const warm = await request('/swap/execute', {
      method: 'POST',
      key: (await approvalKey()).key,
      body: { ...fiftyUsdc, amountIn: '1000000' },
    })
    if (warm.status !== 200) throw new Error(`warm-up swap: ${warm.status} ${JSON.stringify(warm.body)}`)
  })

  t.test('a $50 swap under approvalAboveUsd 10 answers 202 and waits; GET /approvals lists it; nothing is sent', async (t) => {
    const before = await nonceOf()
    const { key, id, approval, res } = await held()
    t.match(res.body, {
      status: 'awaiting_approval',
      idempotencyKey: /.+/,
      approval: { status: 'pending', policy: { owner: `key ${id}`, approvalAboveUsd: 10 } },
    })
    t.match(res.body.approval.reason, /worth \$50\.00, over the approval threshold of \$10\.00/)
    t.ok(res.headers.get('idempotency-key'), 'the Idempotency-Key to repeat it with')
    const list = await request('/approvals', { key })
    t.equal(list.status, 200)
    t.same(
      list.body.approvals.map((a: { id: string }) => a.id),
      [approval.id],
    )
    t.equal((await request(approval.links.self, { key })).body.status, 'pending')
    t.equal(await nonceOf(), before)
    t.same(await executionsOf(key), [])
  })

  t.test('the key that asked cannot approve its own swap: 403, nothing is sent, it stays pending', async (t) => {
    const { key, id, approval } = await held()
    const before = await nonceOf()
    const res = await request(approval.links.approve, { method: 'POST', key })
    t.equal(res.status, 403)
    t.match(res.body, {
      error: new RegExp(`^key ${id} asked for this swap and cannot approve it itself: .*admin key.*approvers.*selfApprove`),
    })
    t.equal((await request(approval.links.self, { key })).body.status, 'pending')
    t.equal(await nonceOf(), before)
    t.same(await executionsOf(key), [])
  })

  t.test('an admin key approves → mined once: two approvals sent at once answer the same execution', async (t) => {
    const { key, approval } = await held()
    const admin = (await request('/approvals', { key: adminKey })).body.approvals.find((a: { id: string }) => a.id === approval.id)
    t.ok(admin, 'an admin key lists every key’s approvals')
    const before = await nonceOf()
    const [a, b] = await Promise.all([
      request(approval.links.approve, { method: 'POST', key: adminKey }),
      request(approval.links.approve, { method: 'POST', key: adminKey }),
    ])
    t.same([a.status, b.status], [200, 200])
    t.match(a.body, { status: 'approved', decidedBy: /^key_/, result: { success: true, amountIn: '50000000' } })
    t.equal(b.body.result.executionId, a.body.result.executionId, 'the same execution')
    const receipt = await publicClient.getTransactionReceipt({ hash: a.body.result.hash })
    t.equal(receipt.status, 'success', 'mined')
    t.equal(await nonceOf(), before + 1, 'one transaction')
    const executions = await executionsOf(key)
    t.same(
      executions.map((e) => e.id),
      [a.body.result.executionId],
      'GET /swap/executions shows one',
    )
  })

  t.test('a key its policy names in approvers lists and approves it; the swap is mined', async (t) => {
    const approver = await fleet.createKey('readwrite', 'approver')
    const { key, approval } = await held({ approvalAboveUsd: 10, approvers: [approver.id] })
    const listed = await request('/approvals', { key: approver.key })
    t.same(
      listed.body.approvals.map((a: { id: string }) => a.id),
      [approval.id],
      'the approver sees what waits for it',
    )
    t.match(listed.body.approvals[0].policy, { approvers: [approver.id], selfApprove: false })
    const before = await nonceOf()
    const approved = await request(approval.links.approve, { method: 'POST', key: approver.key })
    t.equal(approved.status, 200, JSON.stringify(approved.body))
    t.match(approved.body, { status: 'approved', decidedBy: approver.id, result: { success: true } })
    t.equal(await nonceOf(), before + 1, 'one transaction')
    t.equal((await executionsOf(key)).length, 1)
  })

  t.test('with selfApprove: true in its spend policy the key approves its own swap', async (t) => {
    const { key, id, approval } = await held({ approvalAboveUsd: 10, selfApprove: true })
    t.match(approval, { policy: { selfApprove: true } })
    const approved = await request(approval.links.approve, { method: 'POST', key })
    t.equal(approved.status, 200, JSON.stringify(approved.body))
    t.match(approved.body, { status: 'approved', decidedBy: id, result: { success: true } })
  })

  t.test('reject by the key that asked → nothing sent, and approve afterwards answers 409', async (t) => {
    const { key, approval } = await held()
    const before = await nonceOf()
    const rejected = await request(approval.links.reject, { method: 'POST', key, body: { reason: 'not today' } })
    t.equal(rejected.status, 200)
    t.match(rejected.body, { status: 'rejected', decisionReason: 'not today', result: null })
    const approve = await request(approval.links.approve, { method: 'POST', key: adminKey })
    t.equal(approve.status, 409)
    t.match(approve.body.error, /rejected .*not today.*nothing was sent/)
    t.equal(await nonceOf(), before)
    t.same(await executionsOf(key), [])
  })

  t.test('an approval nobody decides expires: nothing sent, approve answers 409', async (t) => {
    const { key, approval } = await held()
    const before = await nonceOf()
    const expired = await eventually(
      'the approval to expire',
      async () => {
        const got = await request(approval.links.self, { key })
        return got.body.status === 'expired' ? got.body : undefined
      },
      ttlMs + 10_000,
    )
    t.match(expired.error, /abandoned: not approved within 4 seconds/)
    const approve = await request(approval.links.approve, { method: 'POST', key: adminKey })
    t.equal(approve.status, 409)
    t.equal(await nonceOf(), before)
    t.same(await executionsOf(key), [])
  })

  t.test('a readonly key gets 403 at the gateway; another readwrite key 404', async (t) => {
    const { key, approval } = await held()
    const readonly = await fleet.createKey('readonly')
    t.equal((await request('/approvals', { key: readonly.key })).status, 403)
    t.equal((await request(approval.links.approve, { method: 'POST', key: readonly.key })).status, 403)
    const other = await fleet.createKey('readwrite')
    t.equal((await request(approval.links.self, { key: other.key })).status, 404)
    t.equal((await request(approval.links.approve, { method: 'POST', key: other.key })).status, 404)
    t.equal((await request(approval.links.reject, { method: 'POST', key: other.key })).status, 404)
    t.same((await request('/approvals', { key: other.key })).body.approvals, [])
    t.equal((await request(approval.links.self, { key })).body.status, 'pending', 'still pending for its own key')
  })
})
