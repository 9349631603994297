import { erc20Abi } from '@ats/chain'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { getAddress, type Address } from 'viem'
import { adminKey, eventually, startAgentFleet } from './fleet.ts'

/** An automation whose swaps are over the key's approvalAboveUsd: each run waits for a person, through the gateway. */
const fleet = await startAgentFleet(t, { automationEnv: { AUTOMATION_MIN_INTERVAL_MS: '2000', AUTOMATION_TICK_MS: '100', APPROVAL_POLL_MS: '200' } })
const { request, devnet, publicClient } = fleet
const wallet = getAddress(privateKeyToAccount(generatePrivateKey()).address)
const created = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label: 'approvals', wallet } })
if (created.status !== 201) throw new Error(JSON.stringify(created.body))
const { key, id: keyId } = created.body as { key: string; id: string }
const policy = await request(`/admin/keys/${keyId}/policy`, { method: 'PUT', key: adminKey, body: { policy: { approvalAboveUsd: 10 } } })
if (policy.status !== 200) throw new Error(JSON.stringify(policy.body))
const arb = getAddress(devnet.book.tokens.find((token) => token.symbol === 'ARB')!.address as Address)
const arbOf = () => publicClient.readContract({ address: arb, abi: erc20Abi, functionName: 'balanceOf', args: [wallet] })

t.test('an automation run over approvalAboveUsd waits; approved it swaps once, rejected it ends without a swap', async (t) => {
  // 20 USDC every 2 s: worth $20, over the key's $10
  const made = await request('/automations', {
    method: 'POST',
    key,
    body: { walletAddress: wallet, type: 'recurring-buy', name: 'big buys', config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '20000000', interval: '2s' } },
  })
  t.equal(made.status, 201, JSON.stringify(made.body))
  const { id } = made.body.automation
  const runsOf = async () => (await request(`/automations/${id}/runs`, { key })).body.runs as any[]
  const waiting = () =>
    eventually('a run waiting for approval', async () => {
      const [run] = await runsOf()
      return run?.status === 'awaiting_approval' ? run : undefined
    }, 30_000)
  const ended = (runId: string) =>
    eventually(`run ${runId} to end`, async () => {
      const run = (await runsOf()).find((r) => r.id === runId)
      return run.status === 'awaiting_approval' ? undefined : run
    }, 30_000)

  const first = await waiting()
  t.match(first, { status: 'awaiting_approval', txHash: null, approval: { id: /^apr_/, url: `/approvals/${first.approval.id}` } })
  const shown = await request(first.approval.url, { key })
  t.equal(shown.status, 200, 'the run says where to approve, and the gateway answers there')
  t.match(shown.body, { id: first.approval.id, status: 'pending', swap: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '20000000' }, requestedBy: { keyId, automationRunId: first.id } })
  t.equal(await arbOf(), 0n, 'nothing bought before the approval')

  // approved twice at once: one swap
  const approvals = await Promise.all([0, 1].map(() => request(`/approvals/${first.approval.id}/approve`, { method: 'POST', key })))
  for (const approved of approvals) t.equal(approved.status, 200, JSON.stringify(approved.body))
  const succeeded = await ended(first.id)
  t.match(succeeded, { status: 'success', txHash: /^0x[0-9a-f]{64}$/, approval: { id: first.approval.id } })
  t.same(approvals.map((a) => a.body.result?.hash), [succeeded.txHash, succeeded.txHash], 'both approvals answer the one swap the run recorded')
  t.equal((await publicClient.getTransactionReceipt({ hash: succeeded.txHash })).status, 'success')
  t.equal(await arbOf(), BigInt(succeeded.amountOut), 'the wallet got what the one swap bought')
  t.match((await request(`/automations/${id}`, { key })).body.automation, { runs: 1 })

  const second = await waiting()
  t.not(second.id, first.id)
  const rejected = await request(`/approvals/${second.approval.id}/reject`, { method: 'POST', key, body: { reason: 'enough for today' } })
  t.equal(rejected.status, 200, JSON.stringify(rejected.body))
  const skipped = await ended(second.id)
  t.match(skipped, { status: 'skipped', txHash: null, amountOut: null, error: `not swapped: approval ${second.approval.id} was rejected by ${keyId}: enough for today` })
  t.equal(await arbOf(), BigInt(succeeded.amountOut), 'nothing more bought')
  t.match((await request(`/automations/${id}`, { key })).body.automation, { runs: 1 })

  const third = await waiting()
  t.same((await request(`/automations/${id}`, { method: 'DELETE', key })).body, { ok: true })
  t.match((await request(`/approvals/${third.approval.id}`, { key })).body, { status: 'rejected' }, "deleting the automation withdrew its waiting run's approval")
})
