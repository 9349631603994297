import { identityHeaders, natsChannels, type DomainEvent } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import { connect } from 'nats'
import pg from 'pg'
import t from 'tap'
import { eventually, keyHeaders, startTrading } from './helpers.ts'

/**
 * Swaps over a key's approvalAboveUsd wait for a person other than the key that asked: nothing is
 * sent until approved, and then once.
 */
const fleet = await startTrading(t)
const { call, publicClient, serverWallet } = fleet
const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
const policy = { approvalAboveUsd: 10, maxUsdPerSwap: 1000, maxUsdPerDay: 100_000 }
const usdc = (dollars: number) => ({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: String(dollars * 1_000_000) })
const executions = async (keyId: string) => (await call('GET', '/swap/executions', { keyId })).body.executions as { id: string }[]
/** An admin key, as the gateway forwards it: it decides any approval */
const asAdmin = { keyId: 'key_the_admin', headers: keyHeaders('key_the_admin', 'admin') }

// the server wallet approves the router once; later swaps are one transaction each
t.before(async () => {
  const res = await call('POST', '/swap/execute', { body: usdc(1) })
  if (res.status !== 200) throw new Error(`warm-up swap failed: ${res.status} ${JSON.stringify(res.body)}`)
})

/** A key with the approval policy (or `withPolicy`), and a $50 swap of it held for approval. */
async function held(idempotencyKey = `held-${Math.random()}`, withPolicy: Record<string, unknown> = policy) {
  const { id: keyId } = await fleet.createKey(withPolicy)
  const res = await call('POST', '/swap/execute', { body: usdc(50), keyId, headers: { 'idempotency-key': idempotencyKey } })
  if (res.status !== 202) throw new Error(`expected 202, got ${res.status} ${JSON.stringify(res.body)}`)
  return { keyId, approval: res.body.approval, res }
}

t.test('a swap under the approval threshold is made at once', async (t) => {
  const { id: keyId } = await fleet.createKey(policy)
  const res = await call('POST', '/swap/execute', { body: usdc(5), keyId })
  t.equal(res.status, 200)
  t.equal(res.body.success, true)
  t.equal((await executions(keyId)).length, 1)
})

t.test('a swap over the threshold answers 202 with a pending approval, and nothing is sent', async (t) => {
  const before = await nonceOf()
  const { keyId, approval, res } = await held('over-1')
  t.match(res.body, { status: 'awaiting_approval', idempotencyKey: 'over-1' })
  t.match(approval, {
    id: /^apr_/,
    status: 'pending',
    reason: new RegExp(`worth \\$50\\.00, over the approval threshold of \\$10\\.00 set by the spend policy of key ${keyId}`),
    swap: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000', dex: 'uniswap', slippageBps: 50, recipient: null },
    policy: { owner: `key ${keyId}`, approvalAboveUsd: 10 },
    requestedBy: { keyId, jobId: null, automationRunId: null },
    decidedBy: null,
    result: null,
    links: { approve: `/approvals/${approval.id}/approve`, console: `/console/#/approvals/${approval.id}` },
  })
  t.ok(approval.quote.usdValue > 49.9 && approval.quote.usdValue < 50.1, `valued at $50 (${approval.quote.usdValue})`)
  t.ok(approval.expiresAt - approval.createdAt === 900_000, 'expires in 15 minutes')
  t.equal(await nonceOf(), before, 'no transaction')
  t.same(await executions(keyId), [], 'no execution')

  const again = await call('POST', '/swap/execute', { body: usdc(50), keyId, headers: { 'idempotency-key': 'over-1' } })
  t.equal(again.status, 202, 'a repeat with the same Idempotency-Key')
  t.equal(again.body.approval.id, approval.id, 'answers the same approval')
  t.equal(again.headers.get('idempotent-replayed'), 'true')

  const list = await call('GET', '/approvals', { keyId })
  t.same(
    list.body.approvals.map((a: { id: string }) => a.id),
    [approval.id],
  )
  t.equal((await call('GET', `/approvals/${approval.id}`, { keyId })).body.status, 'pending')
})

t.test('a swap over the caps is refused at once (403), not held for approval', async (t) => {
  const { id: keyId } = await fleet.createKey({ ...policy, maxUsdPerSwap: 20 })
  const res = await call('POST', '/swap/execute', { body: usdc(50), keyId })
  t.equal(res.status, 403)
  t.match(res.body.error, /over its limit of \$20\.00 per swap/)
  t.same((await call('GET', '/approvals', { keyId })).body.approvals, [])
})

t.test('the key that asked gets 403 on approve; the approval stays pending and it may still reject it', async (t) => {
  const { keyId, approval } = await held()
  t.match(approval.policy, { approvers: [], selfApprove: false })
  const res = await call('POST', `/approvals/${approval.id}/approve`, { keyId })
  t.equal(res.status, 403)
  t.equal(
    res.body.error,
    `key ${keyId} asked for this swap and cannot approve it itself: an admin key or a key its spend policy names in approvers decides it (a policy with selfApprove: true lets a key approve its own swaps)`,
  )
  t.equal((await call('GET', `/approvals/${approval.id}`, { keyId })).body.status, 'pending')
  t.same(await executions(keyId), [])
  t.match((await call('POST', `/approvals/${approval.id}/reject`, { keyId })).body, { status: 'rejected', decidedBy: keyId })
})

t.test('a key the policy names in approvers sees, lists and approves it; with selfApprove the key itself approves', async (t) => {
  const { id: approver } = await fleet.createKey()
  const { keyId, approval } = await held(undefined, { ...policy, approvers: [approver] })
  t.match(approval.policy, { approvers: [approver], selfApprove: false })
  t.equal((await call('GET', `/approvals/${approval.id}`, { keyId: approver })).status, 200)
  t.same(
    (await call('GET', '/approvals', { keyId: approver })).body.approvals.map((a: { id: string }) => a.id),
    [approval.id],
  )
  t.equal((await call('POST', `/approvals/${approval.id}/approve`, { keyId })).status, 403, 'not the key that asked')
  const approved = await call('POST', `/approvals/${approval.id}/approve`, { keyId: approver })
  t.match(approved.body, { status: 'approved', decidedBy: approver, result: { success: true } })

  const own = await held(undefined, { ...policy, selfApprove: true })
  t.match(own.approval.policy, { selfApprove: true })
  const self = await call('POST', `/approvals/${own.approval.id}/approve`, { keyId: own.keyId })
  t.match(self.body, { status: 'approved', decidedBy: own.keyId, result: { success: true } })
})

t.test('approve runs the swap once, with a fresh quote; a repeat answers the same swap', async (t) => {
  const { keyId, approval } = await held()
  const before = await nonceOf()
  const wethBefore = await fleet.balanceOf('WETH', serverWallet)
  const res = await call('POST', `/approvals/${approval.id}/approve`, asAdmin)
  t.equal(res.status, 200)
  t.match(res.body, {
    id: approval.id,
    status: 'approved',
    decidedBy: 'key_the_admin',
    error: null,
    result: { success: true, tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000' },
  })
  t.equal(await nonceOf(), before + 1, 'one transaction')
  t.equal((await fleet.balanceOf('WETH', serverWallet)) - wethBefore, BigInt(res.body.result.amountOut), 'the WETH arrived')
  const rows = await executions(keyId)
  t.same(
    rows.map((r) => r.id),
    [res.body.result.executionId],
    'one execution',
  )
  const again = await call('POST', `/approvals/${approval.id}/approve`, asAdmin)
  t.equal(again.status, 200)
  t.equal(again.body.result.hash, res.body.result.hash, 'a repeat answers the same swap')
  t.equal(await nonceOf(), before + 1, 'still one transaction')
})

t.test('two approvals at once make one swap, and both answer it', async (t) => {
  const { keyId, approval } = await held()
  const before = await nonceOf()
  const [a, b] = await Promise.all([
    call('POST', `/approvals/${approval.id}/approve`, asAdmin),
    call('POST', `/approvals/${approval.id}/approve`, asAdmin),
  ])
  t.same([a.status, b.status], [200, 200])
  t.ok(a.body.result?.executionId, 'a swap was made')
  t.equal(b.body.result?.executionId, a.body.result?.executionId, 'both answer the same execution')
  t.equal(await nonceOf(), before + 1, 'one transaction')
  t.equal((await executions(keyId)).length, 1)
})

t.test('reject sends nothing, and an approve after it answers 409', async (t) => {
  const { keyId, approval } = await held()
  const before = await nonceOf()
  const res = await call('POST', `/approvals/${approval.id}/reject`, { keyId, body: { reason: 'too much' } })
  t.equal(res.status, 200)
  t.match(res.body, { status: 'rejected', decidedBy: keyId, result: null })
  const approve = await call('POST', `/approvals/${approval.id}/approve`, asAdmin)
  t.equal(approve.status, 409)
  t.match(approve.body.error, /was rejected by .*\(too much\); nothing was sent/)
  t.equal((await call('POST', `/approvals/${approval.id}/reject`, { keyId })).status, 409, 'a second reject')
  t.equal(await nonceOf(), before)
  t.same(await executions(keyId), [])
  t.same(
    (await call('GET', '/approvals?status=rejected', { keyId })).body.approvals.map((a: { id: string }) => a.id),
    [approval.id],
  )
})

t.test("another key's approval is not found; an admin key sees and decides it", async (t) => {
  const { approval } = await held()
  const { id: other } = await fleet.createKey()
  t.equal((await call('GET', `/approvals/${approval.id}`, { keyId: other })).status, 404)
  t.equal((await call('POST', `/approvals/${approval.id}/approve`, { keyId: other })).status, 404)
  t.equal((await call('POST', `/approvals/${approval.id}/reject`, { keyId: other })).status, 404)
  t.notOk((await call('GET', '/approvals', { keyId: other })).body.approvals.some((a: { id: string }) => a.id === approval.id))
  const list = await call('GET', '/approvals', asAdmin)
  t.ok(
    list.body.approvals.some((a: { id: string }) => a.id === approval.id),
    'an admin key lists every key’s',
  )
  const rejected = await call('POST', `/approvals/${approval.id}/reject`, asAdmin)
  t.match(rejected.body, { status: 'rejected', decidedBy: 'key_the_admin' })
})

t.test('over NATS: execute answers the approval; its requester reads and withdraws it', async (t) => {
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const { execute, approval, approvalWithdraw } = natsChannels(fleet.base.NATS_NAMESPACE!).trading
  const { id: keyId } = await fleet.createKey(policy)
  const identity = { keyId, ownerId: keyId }
  const request = { ...usdc(50), slippageBps: 50, idempotencyKey: 'job:j9:step:1', jobId: 'job_j9' }
  const answer = await callEndpoint(nc, execute, request, { identity, timeoutMs: 30_000 })
  if (!('approval' in answer)) throw new Error('not held')
  t.match(answer, { status: 'awaiting_approval', approval: { status: 'pending', requestedBy: { keyId, jobId: 'job_j9' } } })
  const id = answer.approval.id
  t.equal(
    ((await callEndpoint(nc, execute, request, { identity, timeoutMs: 30_000 })) as typeof answer).approval.id,
    id,
    'a retried step gets the same approval',
  )
  t.equal((await callEndpoint(nc, approval, { id }, { identity })).approval?.status, 'pending')
  t.equal(
    (await callEndpoint(nc, approval, { id }, { identity: { keyId: 'key_other', ownerId: 'key_other' } })).approval,
    null,
    "someone else's is null",
  )
  t.equal((await callEndpoint(nc, approvalWithdraw, { id, reason: 'job cancelled' }, { identity: { keyId: 'key_other' } })).approval, null)
  const withdrawn = await callEndpoint(nc, approvalWithdraw, { id, reason: 'job cancelled' }, { identity })
  t.match(withdrawn.approval, { status: 'rejected', decidedBy: 'requester', decisionReason: 'job cancelled' })
  t.equal((await call('POST', `/approvals/${id}/approve`, asAdmin)).status, 409)
  t.same(await executions(keyId), [])
})

t.test("over NATS: a paid job's decideBy caps the approval's wait; it expires then, naming the payment", async (t) => {
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const { execute, approval } = natsChannels(fleet.base.NATS_NAMESPACE!).trading
  const { id: keyId } = await fleet.createKey(policy)
  const identity = { keyId, ownerId: keyId }
  const decideBy = Date.now() + 1500
  const request = { ...usdc(50), slippageBps: 50, idempotencyKey: 'job:jd:step:1', jobId: 'job_jd', decideBy }
  const answer = await callEndpoint(nc, execute, request, { identity, timeoutMs: 30_000 })
  if (!('approval' in answer)) throw new Error('not held')
  t.match(answer.approval, { status: 'pending', expiresAt: decideBy, expiresWithPayment: true })
  const expired = await eventually('the approval to expire', async () => {
    const { approval: now } = await callEndpoint(nc, approval, { id: answer.approval.id }, { identity })
    return now?.status === 'expired' ? now : undefined
  })
  t.equal(
    expired.error,
    `abandoned: not decided by ${new Date(decideBy).toISOString()}, after which the payment of the agent job that asked could no longer be settled`,
  )
  t.equal((await call('POST', `/approvals/${answer.approval.id}/approve`, asAdmin)).status, 409)
  t.same(await executions(keyId), [])
})

t.test("with TRADING_PUBLIC_URL an approval's console link is a whole URL on the public gateway", async (t) => {
  const linked = await fleet.replica(t, { TRADING_PUBLIC_URL: 'https://api.example.com/' })
  const { id: keyId } = await fleet.createKey(policy)
  const res = await fetch(`${linked.url}/swap/execute`, {
    method: 'POST',
    headers: { ...keyHeaders(keyId), 'content-type': 'application/json' },
    body: JSON.stringify(usdc(50)),
  })
  t.equal(res.status, 202)
  const { approval } = (await res.json()) as { approval: { id: string; links: Record<string, string> } }
  t.equal(approval.links.console, `https://api.example.com/console/#/approvals/${approval.id}`)
  t.equal(approval.links.approve, `/approvals/${approval.id}/approve`, 'the API links stay paths')
  const read = await fetch(`${linked.url}/approvals/${approval.id}`, { headers: keyHeaders(keyId) })
  t.equal(((await read.json()) as { links: { console: string } }).links.console, approval.links.console, 'and so it reads')
})

t.test('an approval not decided in time expires: nothing sent, approve answers 409', async (t) => {
  const quick = await fleet.replica(t, { APPROVAL_TTL_MS: '1500' })
  const { id: keyId } = await fleet.createKey(policy)
  const before = await nonceOf()
  const res = await fetch(`${quick.url}/swap/execute`, {
    method: 'POST',
    headers: { ...keyHeaders(keyId), 'content-type': 'application/json' },
    body: JSON.stringify(usdc(50)),
  })
  t.equal(res.status, 202)
  const { approval } = (await res.json()) as { approval: { id: string; expiresAt: number; createdAt: number } }
  t.equal(approval.expiresAt - approval.createdAt, 1500)
  const expired = await eventually('the approval to expire', async () => {
    const got = await call('GET', '/approvals?status=expired', { keyId })
    return got.body.approvals[0]
  })
  t.match(expired, {
    id: approval.id,
    status: 'expired',
    decidedBy: null,
    error: 'abandoned: not approved within 1.5 seconds (APPROVAL_TTL_MS)',
  })
  const approve = await call('POST', `/approvals/${approval.id}/approve`, asAdmin)
  t.equal(approve.status, 409)
  t.match(approve.body.error, /expired: abandoned/)
  t.equal(await nonceOf(), before)
  t.same(await executions(keyId), [])
})

t.test("a payer's approval is decided by a key bound to its wallet; the mined swap announces swap.confirmed to that wallet", async (t) => {
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const channels = natsChannels(fleet.base.NATS_NAMESPACE!)
  const confirmed: DomainEvent[] = []
  const sub = nc.subscribe(channels.admin.events.subjectOf('swap.confirmed'))
  void (async () => {
    for await (const msg of sub) confirmed.push(channels.admin.events.all.message.decode(msg.data))
  })()
  t.teardown(() => sub.unsubscribe())
  const payer = fleet.devnet.accounts[4]!.address
  const allow = await fetch(`${fleet.admin.url}/admin/agent-payers/${payer}`, {
    method: 'PUT',
    headers: { ...keyHeaders('key_test_admin', 'admin'), 'content-type': 'application/json' },
    body: JSON.stringify({ policy }),
  })
  t.equal(allow.status, 200)
  const request = { ...usdc(50), slippageBps: 50, idempotencyKey: 'job:jp:step:1', jobId: 'job_jp' }
  const answer = await callEndpoint(nc, channels.trading.execute, request, { identity: { ownerId: payer }, timeoutMs: 30_000 })
  if (!('approval' in answer)) throw new Error('not held')
  const { id } = answer.approval
  t.match(answer.approval, {
    policy: { owner: `payer ${payer}` },
    requestedBy: { keyId: null, ownerId: payer.toLowerCase(), jobId: 'job_jp' },
  })

  const { id: unbound } = await fleet.createKey()
  t.equal((await call('POST', `/approvals/${id}/approve`, { keyId: unbound })).status, 404, 'a key not bound to the payer')
  const { id: bound } = await fleet.createKey()
  const asWallet = { keyId: bound, headers: { [identityHeaders.wallet]: payer } }
  t.same(
    (await call('GET', '/approvals', asWallet)).body.approvals.map((a: { id: string }) => a.id),
    [id],
    "the payer's approvals are listed for its wallet's key",
  )
  const before = await nonceOf()
  const approved = await call('POST', `/approvals/${id}/approve`, asWallet)
  t.equal(approved.status, 200)
  t.match(approved.body, { status: 'approved', decidedBy: bound, result: { success: true } })
  t.equal(await nonceOf(), before + 1)
  const event = await eventually('swap.confirmed', async () =>
    confirmed.find((e) => e.data.executionId === approved.body.result.executionId),
  )
  t.match(event, {
    type: 'swap.confirmed',
    owner: { wallet: payer.toLowerCase() },
    data: {
      hash: approved.body.result.hash,
      tokenIn: 'USDC',
      tokenOut: 'WETH',
      amountIn: '50000000',
      jobId: 'job_jp',
      blockNumber: approved.body.result.blockNumber,
    },
  })
  t.equal(
    (await callEndpoint(nc, channels.trading.approval, { id }, { identity: { ownerId: payer } })).approval?.status,
    'approved',
    'its requester reads the outcome',
  )
})

t.test('an approval a crash left approved without its swap is run by the sweep, once', async (t) => {
  const { keyId, approval } = await held()
  const before = await nonceOf()
  // what a process that died right after its approve update leaves behind
  const db = new pg.Client({ connectionString: fleet.base.DATABASE_URL })
  await db.connect()
  t.teardown(() => db.end())
  await db.query(
    `UPDATE trading.approvals SET status = 'approved', decided_by = $2, decided_at = now() - interval '1 minute' WHERE id = $1`,
    [approval.id, keyId],
  )
  const done = await eventually(
    'the sweep to run the approved swap',
    async () => {
      const got = await call('GET', `/approvals/${approval.id}`, { keyId })
      return got.body.result ? got.body : undefined
    },
    20_000,
  )
  t.match(done, { status: 'approved', error: null, result: { success: true } })
  t.equal(await nonceOf(), before + 1)
  const again = await call('POST', `/approvals/${approval.id}/approve`, asAdmin)
  t.equal(again.body.result.hash, done.result.hash, 'an approve afterwards answers the same swap')
  t.equal(await nonceOf(), before + 1)
})
