import t from 'tap'
import { getAddress, type Address } from 'viem'
import { eventually, keyHeaders, startAutomationStack } from './helpers.ts'

t.test('three scheduler processes at once: every due run executed exactly once, counted on chain', async (t) => {
  const stack = await startAutomationStack(t, { schedulers: 3 })
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
      body: { walletAddress: wallet, type: 'recurring-buy', name: `dca ${i}`, config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1s', maxRuns: 4 } },
    })
    t.equal(created.status, 201, JSON.stringify(created.body))
    t.match(created.body.automation, { status: 'active', walletAddress: wallet, type: 'recurring-buy', runs: 0, config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1s', maxRuns: 4, slippageBps: 50 } })
    ids.push(created.body.automation.id)
  }
  for (const id of ids) {
    const done = await eventually(`automation ${id} to complete`, async () => {
      const res = await call(`/automations/${id}`, { headers: keyHeaders(keyId) })
      return res.body.automation.status === 'active' ? undefined : res.body.automation
    }, 60_000)
    t.match(done, { status: 'completed', runs: 4, nextRunAt: null, statusReason: 'it made its 4 runs (maxRuns)' })
  }

  const resume = await call(`/automations/${ids[0]}`, { method: 'PATCH', headers: keyHeaders(keyId), body: { status: 'active' } })
  t.equal(resume.status, 400, 'a completed recurring buy is not resumed past its maxRuns')
  t.match(resume.body.error, /cannot be resumed: it has made its 4 runs \(maxRuns\)/)

  const runs = (await Promise.all(ids.map((id) => call(`/automations/${id}/runs`, { headers: keyHeaders(keyId) })))).flatMap((r) => r.body.runs)
  t.equal(runs.length, 12, 'four runs each, no more')
  t.ok(runs.every((r: any) => r.status === 'success' && /^0x[0-9a-f]{64}$/.test(r.txHash) && BigInt(r.amountOut) > 0n), 'every run mined')
  const onChain = await stack.swapsSince(startBlock)
  t.same([...onChain].sort(), runs.map((r: any) => r.txHash).sort(), 'one swap on chain per run: none doubled by the three schedulers')
  const after = await stack.balanceOf('ARB', wallet)
  const bought = runs.reduce((sum: bigint, r: any) => sum + BigInt(r.amountOut), 0n)
  t.equal(after - before, bought, "the wallet's ARB grew by what the runs bought")
})
