// The order automations through the gateway on the devnet: a TWAP's slices, and stop orders (stop-loss,
// take-profit, trailing stop) firing on market-data's ETH price as real swaps move the WETH/USDC pool;
// the agent making one from plain words; and a stale price (market-data on CoinGecko) that never fires.
import { erc20Abi, uniswapPoolAbi, uniswapSwapRouter02Abi } from '@ats/chain'
import OpenAI from 'openai'
import t from 'tap'
import { createWalletClient, getAddress, http, maxUint256, parseAbi, parseEther, parseUnits, type Address, type Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { adminKey, eventually, startAgentFleet } from '../fleet.ts'

/**
 * Each test has a key bound to a fresh wallet of its own (the server wallet pays, the wallet
 * receives). ETH's price is market-data's (pools source): the price of Uniswap's WETH/USDC 0.05%
 * pool, which devnet account 2 moves with swaps capped at a price limit, and puts back after
 * each test.
 */
t.test('TWAP slices and stop orders on the pools price, through the gateway', async (t) => {
  const fleet = await startAgentFleet(t, {
    automationEnv: {
      AUTOMATION_MIN_INTERVAL_MS: '1000',
      AUTOMATION_TICK_MS: '100',
      AUTOMATION_TRIGGER_CHECK_MS: '200',
    },
    // a pool's move shows in market-data's prices within a tick or two
    marketEnv: { MARKET_CACHE_TTL_MS: '100' },
  })
  const { request, devnet, publicClient } = fleet
  const token = (symbol: string) => getAddress(devnet.book.tokens.find((entry) => entry.symbol === symbol)!.address as Address)
  const [weth, usdc] = [token('WETH'), token('USDC')]
  const balanceOf = (address: Address, owner: Address) =>
    publicClient.readContract({ address, abi: erc20Abi, functionName: 'balanceOf', args: [owner] })
  const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

  /** A readwrite key bound to a fresh wallet: what its automations buy or sell for goes there. */
  const boundKey = async (label: string) => {
    const wallet = getAddress(privateKeyToAccount(generatePrivateKey()).address)
    const created = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label, wallet } })
    if (created.status !== 201) throw new Error(JSON.stringify(created.body))
    const key = created.body.key as string
    const create = (type: string, config: Record<string, unknown>) =>
      request('/automations', { method: 'POST', key, body: { walletAddress: wallet, type, name: `${type} test`, config } })
    const get = async (id: string) => (await request(`/automations/${id}`, { key })).body.automation
    /** oldest first */
    const runsOf = async (id: string) => ((await request(`/automations/${id}/runs?limit=100`, { key })).body.runs as any[]).reverse()
    const completed = (id: string, timeoutMs = 30_000) =>
      eventually(
        `automation ${id} completed`,
        async () => {
          const automation = await get(id)
          return automation.status === 'completed' ? automation : undefined
        },
        timeoutMs,
      )
    return { key, wallet, create, get, runsOf, completed }
  }

  const reader = await boundKey('prices')
  /** ETH's USD price as a client reads it (GET /market/prices). */
  const ethPrice = async () => {
    const res = await request('/market/prices', { key: reader.key })
    if (res.status !== 200) throw new Error(JSON.stringify(res.body))
    return res.body.prices.ETH.price as number
  }

  // the mover: devnet account 2, with WETH wrapped from its ether and both tokens approved to SwapRouter02
  const pool = getAddress(devnet.book.uniswapV3.pools.WETH_USDC_500 as Address)
  const router = getAddress(devnet.book.uniswapV3.swapRouter02 as Address)
  const mover = createWalletClient({ account: privateKeyToAccount(devnet.accounts[2]!.privateKey), transport: http(devnet.rpcUrl) })
  const mined = async (hash: Hex) => {
    const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 })
    if (receipt.status !== 'success') throw new Error(`mover transaction ${hash} reverted`)
  }
  await mined(
    await mover.writeContract({
      chain: null,
      address: weth,
      abi: parseAbi(['function deposit() payable']),
      functionName: 'deposit',
      value: parseEther('500'),
    }),
  )
  for (const address of [weth, usdc]) {
    await mined(await mover.writeContract({ chain: null, address, abi: erc20Abi, functionName: 'approve', args: [router, maxUint256] }))
  }
  const wethIsToken0 = weth.toLowerCase() < usdc.toLowerCase()

  /**
   * Swaps on the WETH/USDC pool until its price is `target` USD per WETH (the swap's price limit
   * stops it there), then waits until market-data answers that price.
   */
  async function moveEthTo(target: number) {
    // a swap of the fleet's (an order firing) can move the pool between the read of its price and
    // the mover's swap: past the limit, the router reverts ("SPL"); read it again and move from there
    for (let attempt = 1; ; attempt++) {
      const [sqrtPrice] = await publicClient.readContract({ address: pool, abi: uniswapPoolAbi, functionName: 'slot0' })
      // whole token1 per whole token0
      const mid = (Number(sqrtPrice) / 2 ** 96) ** 2 * 10 ** (wethIsToken0 ? 18 - 6 : 6 - 18)
      const now = wethIsToken0 ? mid : 1 / mid
      if (Math.abs(now / target - 1) < 1e-4) break
      const factor = Math.sqrt(wethIsToken0 ? target / now : now / target)
      const limit = (sqrtPrice * BigInt(Math.round(factor * 1e12))) / 10n ** 12n
      const down = target < now
      const hash = await mover.writeContract({
        chain: null,
        address: router,
        abi: uniswapSwapRouter02Abi,
        functionName: 'exactInputSingle',
        args: [
          {
            tokenIn: down ? weth : usdc,
            tokenOut: down ? usdc : weth,
            fee: 500,
            recipient: mover.account.address,
            // more than the move takes: the limit ends the swap
            amountIn: down ? parseEther('400') : parseUnits('900000', 6),
            amountOutMinimum: 0n,
            sqrtPriceLimitX96: limit,
          },
        ],
      })
      const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 })
      if (receipt.status === 'success') break
      if (attempt === 3) throw new Error(`mover transaction ${hash} reverted ${attempt} times`)
    }
    return eventually(
      `ETH at ${target} USD in market-data`,
      async () => {
        const price = await ethPrice()
        return Math.abs(price / target - 1) < 0.001 ? price : undefined
      },
      10_000,
    )
  }

  const p0 = await ethPrice()
  const cents = (usd: number) => Math.round(usd * 100) / 100
  const sale = '10000000000000000' // 0.01 WETH

  t.test('a TWAP of 10 USDC into WETH over 10 s in 10 slices fills in 10 runs, one a second', async (t) => {
    const owner = await boundKey('twap')
    const created = await owner.create('twap', { tokenIn: 'USDC', tokenOut: 'WETH', amount: '10000000', duration: '10s', slices: 10 })
    t.equal(created.status, 201, JSON.stringify(created.body))
    const { id } = created.body.automation
    t.match(created.body.automation, {
      type: 'twap',
      status: 'active',
      config: { amount: '10000000', duration: '10s', slices: 10, sliceMs: 1000, maxImpactBps: 100, remainder: 'carry' },
      state: { slicesDone: 0, filled: '0', carried: '0', skipped: 0, windowEndsAt: Number },
    })

    const done = await owner.completed(id, 40_000)
    const runs = await owner.runsOf(id)
    t.equal(runs.length, 10, `10 runs: ${runs.map((r) => `${r.status} ${r.trigger?.detail} ${r.error ?? ''}`).join('; ')}`)
    t.same(
      runs.map((r) => [r.status, r.trigger?.kind, r.trigger?.slice, r.trigger?.slices]),
      Array.from({ length: 10 }, (_, i) => ['success', 'twap-slice', i + 1, 10]),
      'every slice a successful run, in order',
    )
    t.same(
      runs.map((r) => r.amountIn),
      Array(10).fill('1000000'),
    )
    t.equal(
      runs.reduce((sum, r) => sum + BigInt(r.amountIn), 0n),
      10_000_000n,
      'the slices sum to the total',
    )
    for (let i = 1; i < runs.length; i++) {
      t.ok(runs[i].scheduledFor - runs[i - 1].scheduledFor >= 1000, `slice ${i + 1} a slice after slice ${i}`)
    }
    t.match(done, {
      runs: 10,
      state: { slicesDone: 10, filled: '10000000', carried: '0', skipped: 0 },
      statusReason: /^the TWAP made its 10 slices: filled 10000000 of 10000000 USDC base units \(10 of 10 slices swapped, 0 not\)$/,
    })
    const bought = runs.reduce((sum, r) => sum + BigInt(r.amountOut), 0n)
    t.ok(bought > 0n)
    t.equal(await balanceOf(weth, owner.wallet), bought, 'the wallet received the WETH the slices bought')
    t.equal((await publicClient.getTransactionReceipt({ hash: runs[9].txHash })).status, 'success')
  })

  t.test('a stop-loss fires once when a large swap moves the pool price through its level, and not before', async (t) => {
    const owner = await boundKey('stop-loss')
    const stopPrice = cents(p0 * 0.96)
    const created = await owner.create('stop-loss', { tokenIn: 'WETH', tokenOut: 'USDC', amount: sale, stopPrice })
    t.equal(created.status, 201, JSON.stringify(created.body))
    const { id, state: first } = created.body.automation
    t.match(first, { price: Number, priceAt: Number })
    t.ok(Math.abs(first.price / p0 - 1) < 0.001, `it starts from the price now (${first.price})`)

    // a few checks (every 200 ms) at the price now: watching, nothing sold
    await wait(1200)
    const watching = await owner.get(id)
    t.match(watching, { status: 'active', runs: 0 })
    t.match(watching.statusReason, new RegExp(`^watching: ETH at [0-9.]+ USD; sells at or below ${stopPrice}$`))
    t.ok(watching.state.priceAt > first.priceAt, 'it read newer prices since')

    // down, but not to the level: still watching
    await moveEthTo(p0 * 0.98)
    const near = await eventually('the order to see the lower price', async () => {
      const automation = await owner.get(id)
      return automation.state.price < p0 * 0.985 ? automation : undefined
    })
    t.match(near, { status: 'active', runs: 0 })
    t.same(await owner.runsOf(id), [], 'no run above the stop')

    // a large WETH sale takes the pool below the stop
    await moveEthTo(p0 * 0.93)
    const done = await owner.completed(id)
    const runs = await owner.runsOf(id)
    t.equal(runs.length, 1, 'one run')
    const [run] = runs
    t.match(run, {
      status: 'success',
      txHash: /^0x[0-9a-f]{64}$/,
      amountIn: sale,
      trigger: { kind: 'stop-loss', threshold: stopPrice, price: Number, priceAt: Number },
    })
    t.ok(run.trigger.price <= run.trigger.threshold, `fired at ${run.trigger.price}, at or below ${run.trigger.threshold}`)
    t.match(done, { runs: 1, statusReason: new RegExp(`^stop-loss: ETH at [0-9.]+ USD, at or below ${stopPrice}: sold$`) })
    t.equal((await publicClient.getTransactionReceipt({ hash: run.txHash })).status, 'success')
    t.equal(await balanceOf(usdc, owner.wallet), BigInt(run.amountOut), 'the wallet received the USDC of the sale')

    await wait(1000)
    t.equal((await owner.runsOf(id)).length, 1, 'still one run')
    await moveEthTo(p0)
  })

  t.test('a trailing stop follows the price up, then fires once when it falls its trail below the highest', async (t) => {
    const owner = await boundKey('trailing')
    const created = await owner.create('trailing-stop', { tokenIn: 'WETH', tokenOut: 'USDC', amount: sale, trailPercent: 3 })
    t.equal(created.status, 201, JSON.stringify(created.body))
    const { id, state: first } = created.body.automation
    t.ok(Math.abs(first.highestPrice / p0 - 1) < 0.001, `highest at first: the price now (${first.highestPrice})`)
    t.ok(Math.abs(first.stopPrice / (first.highestPrice * 0.97) - 1) < 1e-9, `its stop 3% under it (${first.stopPrice})`)

    await moveEthTo(p0 * 1.05)
    const risen = await eventually('the highest price and the stop to rise', async () => {
      const automation = await owner.get(id)
      return automation.state.highestPrice > p0 * 1.049 ? automation : undefined
    })
    const { highestPrice, stopPrice } = risen.state
    t.ok(Math.abs(stopPrice / (highestPrice * 0.97) - 1) < 1e-9, `the stop follows it: ${stopPrice} under ${highestPrice}`)
    t.ok(stopPrice > first.stopPrice, 'the stop rose')
    t.match(risen, { status: 'active', runs: 0 })
    t.match(risen.statusReason, /^watching: ETH at [0-9.]+ USD \(highest [0-9.]+\); sells at or below [0-9.]+$/)

    // below the risen stop, above where it started
    await moveEthTo(p0 * 0.9975)
    const done = await owner.completed(id)
    const runs = await owner.runsOf(id)
    t.equal(runs.length, 1, 'one run')
    const [run] = runs
    t.match(run, { status: 'success', txHash: /^0x[0-9a-f]{64}$/, amountIn: sale, trigger: { kind: 'trailing-stop' } })
    t.ok(run.trigger.threshold > first.stopPrice, `its level was the risen stop (${run.trigger.threshold})`)
    t.ok(Math.abs(run.trigger.threshold / stopPrice - 1) < 0.001)
    t.ok(run.trigger.price <= run.trigger.threshold, `fired at ${run.trigger.price}`)
    t.match(done.statusReason, /^trailing-stop: ETH at [0-9.]+ USD, at or below [0-9.]+, 3% under its highest [0-9.]+: sold$/)
    t.equal(await balanceOf(usdc, owner.wallet), BigInt(run.amountOut))
    await moveEthTo(p0)
  })

  t.test('a stop-loss with a take-profit: the take-profit fires, the stop is cancelled and never fires after', async (t) => {
    const owner = await boundKey('bracket')
    const [stopPrice, takeProfitPrice] = [cents(p0 * 0.95), cents(p0 * 1.03)]
    const created = await owner.create('stop-loss', { tokenIn: 'WETH', tokenOut: 'USDC', amount: sale, stopPrice, takeProfitPrice })
    t.equal(created.status, 201, JSON.stringify(created.body))
    const { id } = created.body.automation
    const watching = await eventually('a check', async () => {
      const automation = await owner.get(id)
      return automation.statusReason ? automation : undefined
    })
    t.match(
      watching.statusReason,
      new RegExp(`^watching: ETH at [0-9.]+ USD; sells at or below ${stopPrice} or at or above ${takeProfitPrice}$`),
    )

    await moveEthTo(p0 * 1.05)
    const done = await owner.completed(id)
    const runs = await owner.runsOf(id)
    t.equal(runs.length, 1, 'one run')
    const [run] = runs
    t.match(run, { status: 'success', txHash: /^0x[0-9a-f]{64}$/, trigger: { kind: 'take-profit', threshold: takeProfitPrice } })
    t.ok(run.trigger.price >= takeProfitPrice, `fired at ${run.trigger.price}`)
    t.match(done.statusReason, new RegExp(`^take-profit: ETH at [0-9.]+ USD, at or above ${takeProfitPrice}: sold; its stop is cancelled$`))

    // through the stop afterwards: nothing more
    await moveEthTo(p0 * 0.92)
    await wait(1500)
    t.equal((await owner.runsOf(id)).length, 1, 'no second run below the stop')
    t.match(await owner.get(id), { status: 'completed', runs: 1, statusReason: done.statusReason })
    await moveEthTo(p0)
  })

  t.test('orders that cannot work are 400s that say why', async (t) => {
    const owner = await boundKey('bad orders')
    const cases: Array<[string, string, Record<string, unknown>, RegExp]> = [
      [
        'a stop-loss above the price now',
        'stop-loss',
        { tokenIn: 'WETH', tokenOut: 'USDC', amount: sale, stopPrice: cents(p0 * 1.05) },
        /^config\.stopPrice [0-9.]+ is at or above ETH's price now \([0-9.]+ USD\): it would sell at once; a stop-loss sells when the price falls to its stopPrice$/,
      ],
      [
        'a take-profit below the price now',
        'take-profit',
        { tokenIn: 'WETH', tokenOut: 'USDC', amount: sale, takeProfitPrice: cents(p0 * 0.95) },
        /^config\.takeProfitPrice [0-9.]+ is at or below ETH's price now \([0-9.]+ USD\): it would sell at once/,
      ],
      [
        'a twap shorter than two intervals',
        'twap',
        { tokenIn: 'USDC', tokenOut: 'WETH', amount: '10000000', duration: '10s', interval: '6s' },
        /^config\.duration 10s is shorter than two intervals of 6s: a TWAP needs at least 2 slices$/,
      ],
      [
        'a twap sliced under the minimum interval',
        'twap',
        { tokenIn: 'USDC', tokenOut: 'WETH', amount: '10000000', duration: '10s', slices: 20 },
        /^config\.duration 10s in 20 slices is a slice every 0\.5 s, shorter than the minimum interval of 1 s/,
      ],
      [
        'a trailing stop with both trails',
        'trailing-stop',
        { tokenIn: 'WETH', tokenOut: 'USDC', amount: sale, trailPercent: 3, trailAmount: 100 },
        /^config\.trailPercent or trailAmount: a trailing-stop takes one of them/,
      ],
    ]
    for (const [name, type, config, message] of cases) {
      const res = await owner.create(type, config)
      t.equal(res.status, 400, name)
      t.match(res.body.error, message, name)
    }
    t.same((await request(`/automations?wallet=${owner.wallet}`, { key: owner.key })).body.automations, [], 'none was made')
  })

  t.test('/v1 in plain words: "sell half my WETH if ETH drops below …" makes the stop-loss, and "show my orders" lists it', async (t) => {
    const owner = await boundKey('plain words')
    // the wallet holds 1 WETH: half of it is what the order sells
    await mined(
      await mover.writeContract({
        chain: null,
        address: weth,
        abi: erc20Abi,
        functionName: 'transfer',
        args: [owner.wallet, parseEther('1')],
      }),
    )
    const stop = Math.floor(p0 * 0.8)
    const shown = stop.toLocaleString('en-US')
    const openai = new OpenAI({ apiKey: owner.key, baseURL: `${fleet.gateway.url}/v1`, maxRetries: 0 })
    const ask = async (content: string) =>
      (await openai.chat.completions.create({ model: 'ats-planner', messages: [{ role: 'user', content }] })).choices[0]!.message.content!
    const answer = await ask(`sell half my WETH if ETH drops below ${shown}`)
    t.match(
      answer,
      new RegExp(`^Created a stop-loss \\((aut_\\S+)\\): it sells 0\\.5 WETH for USDC when ETH is at or below \\$${shown}\\.00`),
    )
    const [automation] = (await request(`/automations?wallet=${owner.wallet}`, { key: owner.key })).body.automations
    t.match(automation, {
      type: 'stop-loss',
      status: 'active',
      source: 'server',
      config: { tokenIn: 'WETH', tokenOut: 'USDC', amount: '500000000000000000', stopPrice: stop },
    })
    t.ok(answer.includes(automation.id), 'the answer names the automation')
    const listed = await ask('show my orders')
    t.match(listed, new RegExp(`${automation.id}`))
    t.match(listed, /stop-loss/)
    t.equal((await request(`/automations/${automation.id}`, { method: 'DELETE', key: owner.key })).status, 200)
  })
})

/**
 * Market-data on CoinGecko (stood in for locally, in its documented shape) whose ETH price can be
 * old: CoinGecko says when it last updated a coin (last_updated_at), and a stop order never
 * sells on a price older than AUTOMATION_PRICE_MAX_AGE_MS.
 */
t.test('a stale price never fires a stop-loss; the same price fresh does, through the gateway', async (t) => {
  const fleet = await startAgentFleet(t, {
    automationEnv: { AUTOMATION_TICK_MS: '100', AUTOMATION_TRIGGER_CHECK_MS: '200', AUTOMATION_PRICE_MAX_AGE_MS: '5000' },
    marketEnv: { PRICE_SOURCE: 'coingecko', MARKET_CACHE_TTL_MS: '100' },
  })
  const { request, upstreams } = fleet
  /** CoinGecko's answer from now on: ETH at `usd`, last updated `updatedAt` (seconds; absent: its answer is all there is) */
  const ethAt = async (usd: number, updatedAt?: number) => {
    const eth = { usd, usd_24h_change: 0, ...(updatedAt === undefined ? {} : { last_updated_at: updatedAt }) }
    upstreams.behave('simple/price', { body: { ethereum: eth, 'usd-coin': { usd: 1, usd_24h_change: 0 } } })
    // market-data's cache (100 ms) and the scheduler's read (100 ms) pass
    await new Promise((resolve) => setTimeout(resolve, 300))
  }
  const wallet = getAddress(privateKeyToAccount(generatePrivateKey()).address)
  const created = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label: 'stale', wallet } })
  const { key } = created.body as { key: string }
  await ethAt(3000)
  const made = await request('/automations', {
    method: 'POST',
    key,
    body: {
      walletAddress: wallet,
      type: 'stop-loss',
      name: 'stale',
      config: { tokenIn: 'WETH', tokenOut: 'USDC', amount: '1000000000000000', stopPrice: 2500 },
    },
  })
  t.equal(made.status, 201, JSON.stringify(made.body))
  const { id } = made.body.automation
  const get = async () => (await request(`/automations/${id}`, { key })).body.automation
  const runs = async () => (await request(`/automations/${id}/runs`, { key })).body.runs as any[]

  // under the stop, but CoinGecko last updated it ten minutes ago
  await ethAt(2000, Math.floor(Date.now() / 1000) - 600)
  await new Promise((resolve) => setTimeout(resolve, 1_500))
  const waiting = await get()
  t.match(waiting, { status: 'active', runs: 0 })
  t.match(waiting.statusReason, /^waiting: ETH's price \(2000 USD\) is stale: read 60\d s ago, over the 5 s a stop order acts on/)
  t.same(await runs(), [], 'no sale on a stale price')

  await ethAt(2000)
  const done = await eventually('the stop-loss to sell', async () => {
    const automation = await get()
    return automation.status === 'completed' ? automation : undefined
  })
  t.match(done, { runs: 1, statusReason: /^stop-loss: ETH at 2000 USD, at or below 2500: sold/ })
  t.match(await runs(), [{ status: 'success', txHash: /^0x/, trigger: { kind: 'stop-loss', price: 2000, threshold: 2500 } }])
})
