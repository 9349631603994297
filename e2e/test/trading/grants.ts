import { erc20Abi } from '@ats/chain'
import OpenAI from 'openai'
import t from 'tap'
import { createWalletClient, getAddress, http, parseEther, type Address, type Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { adminKey, eventually, fundAccount, startAgentFleet, startReceiver } from '../fleet.ts'

/**
 * Trading a user's own funds without holding them, through the gateway on the devnet: the user
 * grants 100 USDC a day for USDC -> WETH on both DEXes (TradeGrants, on chain), the agent swaps
 * from the user's wallet on a /v1 chat, a TWAP's slices swap from it, a daily-limited recurring
 * buy runs under the grant until the day's amount is used, and a revocation stops it. The server wallet never moves.
 */
t.test("swaps and automations on the user's own funds, under the grant it made on chain", async (t) => {
  const fleet = await startAgentFleet(t, {
    automationEnv: { AUTOMATION_MIN_INTERVAL_MS: '2000', AUTOMATION_TICK_MS: '100' },
    adminEnv: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'true' },
  })
  const { request, devnet, publicClient, gateway, serverWallet } = fleet
  const token = (symbol: string) => getAddress(devnet.book.tokens.find((x) => x.symbol === symbol)!.address) as Address
  const balanceOf = (symbol: string, owner: Address) =>
    publicClient.readContract({ address: token(symbol), abi: erc20Abi, functionName: 'balanceOf', args: [owner] })

  // the user: a fresh wallet with 500 USDC and some ETH for its own transactions
  const account = privateKeyToAccount(generatePrivateKey())
  const wallet = account.address
  await publicClient.request({ method: 'anvil_setBalance' as never, params: [wallet, `0x${parseEther('1').toString(16)}`] as never })
  await fundAccount(fleet, wallet, 500_000_000n)
  const user = createWalletClient({ account, chain: publicClient.chain!, transport: http(devnet.rpcUrl) })
  const sendAll = async (transactions: Array<{ to: Address; data: Hex }>) => {
    for (const tx of transactions) {
      const receipt = await publicClient.waitForTransactionReceipt({ hash: await user.sendTransaction({ to: tx.to, data: tx.data }) })
      if (receipt.status !== 'success') throw new Error(`${receipt.transactionHash} reverted`)
    }
  }
  const created = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label: 'own funds', wallet } })
  if (created.status !== 201) throw new Error(JSON.stringify(created.body))
  const key = created.body.key as string
  const server = async () => ({
    usdc: await balanceOf('USDC', serverWallet),
    weth: await balanceOf('WETH', serverWallet),
    eth: await publicClient.getBalance({ address: serverWallet }),
  })
  const serverBefore = await server()

  t.test('the user grants 100 USDC a day for USDC -> WETH on both DEXes and sees it listed', async (t) => {
    const prepared = await request('/grants/prepare', {
      method: 'POST',
      key,
      body: { wallet, tokenIn: 'USDC', amountPerPeriod: '100000000', period: 'day', tokensOut: ['WETH'], dexes: ['uniswap', 'camelot'] },
    })
    t.equal(prepared.status, 200, JSON.stringify(prepared.body))
    t.same(
      prepared.body.transactions.map((tx: { kind: string }) => tx.kind),
      ['approval', 'grant'],
    )
    await sendAll(prepared.body.transactions)
    const listed = await request('/grants', { key })
    t.equal(listed.status, 200)
    t.match(listed.body.grants, [
      { status: 'active', tokenIn: 'USDC', tokensOut: ['WETH'], dexes: ['uniswap', 'camelot'], remaining: '100000000' },
    ])
  })

  t.test('/v1 "swap 30 USDC for WETH": from the user’s wallet, the WETH arrives there, the server wallet does not move', async (t) => {
    const [usdcBefore, wethBefore] = [await balanceOf('USDC', wallet), await balanceOf('WETH', wallet)]
    const openai = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 })
    const completion = await openai.chat.completions.create({
      model: 'ats-planner',
      messages: [{ role: 'user', content: 'swap 30 USDC for WETH' }],
    })
    t.match(
      completion.choices[0]!.message.content,
      new RegExp(`^Swapped 30 USDC for [0-9.]+ WETH on uniswap from your wallet ${wallet}, under its grant`),
    )
    t.equal(await balanceOf('USDC', wallet), usdcBefore - 30_000_000n, '30 USDC left the user’s wallet')
    t.ok((await balanceOf('WETH', wallet)) > wethBefore, 'the WETH arrived in the user’s wallet')
    t.same(await server(), serverBefore, 'the server wallet’s USDC, WETH and ETH did not change')
    const [execution] = (await request('/swap/executions', { key })).body.executions
    t.match(execution, { status: 'success', amountIn: '30000000' })
    t.equal((await request('/grants', { key })).body.grants[0].remaining, '70000000', '70 USDC of the day remain')
  })

  t.test('a TWAP from the user’s wallet: both slices swap under the grant, from the wallet’s own USDC', async (t) => {
    const usdcBefore = await balanceOf('USDC', wallet)
    const made = await request('/automations', {
      method: 'POST',
      key,
      body: {
        walletAddress: wallet,
        source: 'wallet',
        type: 'twap',
        name: 'own funds twap',
        config: { tokenIn: 'USDC', tokenOut: 'WETH', amount: '4000000', duration: '4s', slices: 2 },
      },
    })
    t.equal(made.status, 201, JSON.stringify(made.body))
    const { id } = made.body.automation
    const done = await eventually(
      'the TWAP to complete',
      async () => {
        const { automation } = (await request(`/automations/${id}`, { key })).body
        return automation.status === 'completed' ? automation : undefined
      },
      30_000,
    )
    t.match(done, { runs: 2, state: { slicesDone: 2, filled: '4000000' } })
    t.match((await request(`/automations/${id}/runs`, { key })).body.runs, [
      { status: 'success', amountIn: '2000000', trigger: { slice: 2 } },
      { status: 'success', amountIn: '2000000', trigger: { slice: 1 } },
    ])
    t.equal(await balanceOf('USDC', wallet), usdcBefore - 4_000_000n, 'the 4 USDC left the user’s wallet')
  })

  t.test(
    'a recurring buy from the user’s wallet runs twice under the grant, is skipped when the day’s amount is used, and stops when revoked',
    async (t) => {
      const receiver = await startReceiver(t)
      const hook = await request('/webhooks', {
        method: 'POST',
        key,
        body: { url: receiver.url('/hook'), events: ['automation.run.succeeded', 'automation.run.failed'] },
      })
      t.equal(hook.status, 201, JSON.stringify(hook.body))
      const made = await request('/automations', {
        method: 'POST',
        key,
        body: {
          walletAddress: wallet,
          source: 'wallet',
          type: 'recurring-buy',
          name: 'own funds',
          config: { tokenIn: 'USDC', tokenOut: 'WETH', amount: '30000000', interval: '2s' },
        },
      })
      t.equal(made.status, 201, JSON.stringify(made.body))
      t.equal(made.body.automation.source, 'wallet')
      const { id } = made.body.automation
      const runsOf = async () => ((await request(`/automations/${id}/runs`, { key })).body.runs as any[]).slice().reverse()
      const runs = await eventually(
        'two runs and a skipped one',
        async () => {
          const all = await runsOf()
          return all.length >= 3 && all[2].status !== 'running' ? all : undefined
        },
        60_000,
      )
      t.match(runs.slice(0, 3), [
        { status: 'success', amountIn: '30000000' },
        { status: 'success', amountIn: '30000000' },
        {
          status: 'skipped',
          error:
            /^skipped: the grant 0x[0-9a-f]{64} has 6000000 base units of USDC left this period, the swap needs 30000000; it renews at /,
        },
      ])
      const skippedEvent = await eventually('the skipped run’s webhook', async () =>
        receiver.received.map((r) => JSON.parse(r.body)).find((e) => e.data.runId === runs[2].id),
      )
      t.match(skippedEvent, { type: 'automation.run.failed', data: { status: 'skipped', automationId: id } })
      t.same(await server(), serverBefore, 'the server wallet still did not move')

      const grantId = (await request('/grants', { key })).body.grants[0].id
      const revoke = await request(`/grants/${grantId}/revoke`, { method: 'POST', key })
      t.equal(revoke.status, 200)
      await sendAll(revoke.body.transactions)
      const paused = await eventually(
        'the automation to pause',
        async () => {
          const { automation } = (await request(`/automations/${id}`, { key })).body
          return automation.status === 'paused' ? automation : undefined
        },
        60_000,
      )
      t.match(paused.statusReason, /^paused: the grant to swap USDC from 0x[0-9a-fA-F]{40} was revoked/)
      const usdcAfter = await balanceOf('USDC', wallet)
      const direct = await request('/swap/execute', {
        method: 'POST',
        key,
        body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000', from: wallet },
      })
      t.equal(direct.status, 403)
      t.match(direct.body.error, /was revoked/)
      t.equal(await balanceOf('USDC', wallet), usdcAfter, 'nothing more left the wallet')
    },
  )
})
