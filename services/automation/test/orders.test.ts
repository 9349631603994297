import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { getAddress, type Address } from 'viem'
import { eventually, keyHeaders, startAutomationStack } from './helpers.ts'

/**
 * CoinGecko's /simple/price (https://docs.coingecko.com/reference/simple-price) as market-data
 * calls it, answering the prices the test sets: ETH's is moved through each order's levels, and
 * its last_updated_at may be set in the past (a stale price).
 */
async function startCoinGecko(t: Test) {
  const ids = ['ethereum', 'bitcoin', 'usd-coin', 'tether', 'arbitrum', 'gmx', 'chainlink']
  const prices: Record<string, number> = { ethereum: 3000, bitcoin: 60000, 'usd-coin': 1, tether: 1, arbitrum: 1, gmx: 30, chainlink: 15 }
  let ethUpdatedAt: number | undefined
  const server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x')
    if (url.pathname !== '/simple/price') {
      res.writeHead(404).end('{"error":"not found"}')
      return
    }
    const wanted = (url.searchParams.get('ids') ?? '').split(',').filter((id) => ids.includes(id))
    const now = Math.floor(Date.now() / 1000)
    const body = Object.fromEntries(
      wanted.map((id) => [id, { usd: prices[id], usd_24h_change: 0, last_updated_at: id === 'ethereum' ? (ethUpdatedAt ?? now) : now }]),
    )
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /**
     * ETH's price from now on; `updatedAt` (ms) makes CoinGecko say it was last updated then.
     * Resolves once market-data's cache (100 ms) and the scheduler's read (100 ms) have passed.
     */
    async setEth(price: number, updatedAt?: number) {
      prices.ethereum = price
      ethUpdatedAt = updatedAt === undefined ? undefined : Math.floor(updatedAt / 1000)
      await new Promise((resolve) => setTimeout(resolve, 250))
    },
  }
}

t.test('orders on market-data prices, three scheduler replicas: stop orders fire once, TWAP slices', async (top) => {
  const coingecko = await startCoinGecko(top)
  const stack = await startAutomationStack(top, {
    schedulers: 3,
    env: { AUTOMATION_TRIGGER_CHECK_MS: '200', AUTOMATION_PRICE_MAX_AGE_MS: '5000', APPROVAL_POLL_MS: '200' },
    marketEnv: { PRICE_SOURCE: 'coingecko', COINGECKO_URL: coingecko.url, MARKET_CACHE_TTL_MS: '100' },
  })
  const { devnet, call, publicClient } = stack
  const wallet = getAddress(devnet.accounts[7]!.address) as Address
  const keyId = await stack.createKey(wallet)
  const headers = keyHeaders(keyId)
  const get = async (id: string) => (await call(`/automations/${id}`, { headers })).body.automation
  const runsOf = async (id: string) => (await call(`/automations/${id}/runs`, { headers })).body.runs as any[]
  const post = (type: string, config: Record<string, unknown>) =>
    call('/automations', { headers, body: { walletAddress: wallet, type, name: type, config } })
  const create = async (type: string, config: Record<string, unknown>) => {
    const res = await post(type, config)
    if (res.status !== 201) throw new Error(JSON.stringify(res.body))
    return res.body.automation.id as string
  }
  const completed = (id: string) =>
    eventually(`automation ${id} completed`, async () => {
      const automation = await get(id)
      return automation.status === 'completed' ? automation : undefined
    })
  /** Several checks' time (200 ms each, three replicas) */
  const someChecks = () => new Promise((resolve) => setTimeout(resolve, 1_500))
  // 0.001 WETH sold for USDC, from the server wallet, to the key's wallet
  const sell = { tokenIn: 'WETH', tokenOut: 'USDC', amount: '1000000000000000' }

  top.test('a config that would fire at once or cannot run is refused, saying why', async (t) => {
    await coingecko.setEth(3000)
    const above = await post('stop-loss', { ...sell, stopPrice: 3100 })
    t.equal(above.status, 400)
    t.match(above.body.error, /config\.stopPrice 3100 is at or above ETH's price now \(3000 USD\): it would sell at once/)
    const below = await post('take-profit', { ...sell, takeProfitPrice: 2900 })
    t.equal(below.status, 400)
    t.match(below.body.error, /config\.takeProfitPrice 2900 is at or below ETH's price now \(3000 USD\)/)
    const crossed = await post('stop-loss', { ...sell, stopPrice: 3500, takeProfitPrice: 3200 })
    t.match(crossed.body.error, /stopPrice 3500 must be below takeProfitPrice 3200/)
    const both = await post('trailing-stop', { ...sell, trailPercent: 5, trailAmount: 100 })
    t.match(both.body.error, /^config\.trailPercent or trailAmount: a trailing-stop takes one of them/)
    const tooFar = await post('trailing-stop', { ...sell, trailAmount: 3000 })
    t.match(tooFar.body.error, /trailAmount 3000 is not below ETH's price now/)
    const short = await post('twap', { tokenIn: 'USDC', tokenOut: 'WETH', amount: '10000000', duration: '1m', interval: '45s' })
    t.match(short.body.error, /duration 1m is shorter than two intervals of 45s/)
    const fast = await post('twap', { tokenIn: 'USDC', tokenOut: 'WETH', amount: '10000000', duration: '5s', slices: 10 })
    t.match(fast.body.error, /a slice every 0\.5 s, shorter than the minimum interval of 1 s/)
    const dust = await post('twap', { tokenIn: 'WETH', tokenOut: 'USDC', amount: '20', duration: '10s', slices: 10 })
    t.match(dust.body.error, /a slice of 2 WETH base units cannot be swapped: no route from WETH to USDC/)
    const ended = await post('twap', { tokenIn: 'USDC', tokenOut: 'WETH', amount: '10000000', duration: '10s', slices: 2, endAt: 1 })
    t.match(ended.body.error, /endAt is not a field of a twap/)
    for (const res of [crossed, both, tooFar, short, fast, dust, ended]) t.equal(res.status, 400)
  })

  top.test('a stop-loss waits above its stop and sells once when the price falls through it', async (t) => {
    await coingecko.setEth(3000)
    const from = await publicClient.getBlockNumber({ cacheTime: 0 })
    const id = await create('stop-loss', { ...sell, stopPrice: 2500 })
    t.match(await get(id), { state: { price: 3000 } })
    await someChecks()
    t.match(await get(id), { status: 'active', runs: 0, statusReason: 'watching: ETH at 3000 USD; sells at or below 2500' })
    t.equal((await runsOf(id)).length, 0, 'no sale above the stop')
    await coingecko.setEth(2480)
    const done = await completed(id)
    t.match(done, { runs: 1, statusReason: 'stop-loss: ETH at 2480 USD, at or below 2500: sold' })
    await someChecks()
    const runs = await runsOf(id)
    t.equal(runs.length, 1, 'one run across three replicas')
    t.match(runs[0], { status: 'success', amountIn: sell.amount, trigger: { kind: 'stop-loss', price: 2480, threshold: 2500 } })
    t.equal((await stack.swapsSince(from)).length, 1, 'one swap on chain')
  })

  top.test('a stale price never fires; the same price fresh does', async (t) => {
    await coingecko.setEth(3000)
    const id = await create('stop-loss', { ...sell, stopPrice: 2500 })
    // CoinGecko still answers, but its ETH price was last updated ten minutes ago
    await coingecko.setEth(2000, Date.now() - 600_000)
    await someChecks()
    const waiting = await get(id)
    t.match(waiting, { status: 'active', runs: 0 })
    t.match(waiting.statusReason, /^waiting: ETH's price \(2000 USD\) is stale: read 60\d s ago, over the 5 s a stop order acts on/)
    t.equal((await runsOf(id)).length, 0)
    await coingecko.setEth(2000)
    t.match(await completed(id), { runs: 1 })
    t.match(await runsOf(id), [{ status: 'success', trigger: { kind: 'stop-loss', price: 2000 } }])
  })

  top.test('stop-loss and take-profit together: the take-profit fires, the stop is cancelled', async (t) => {
    await coingecko.setEth(3000)
    const id = await create('stop-loss', { ...sell, stopPrice: 2500, takeProfitPrice: 3500 })
    await someChecks()
    t.match(await get(id), { statusReason: 'watching: ETH at 3000 USD; sells at or below 2500 or at or above 3500' })
    await coingecko.setEth(3600)
    t.match(await completed(id), { runs: 1, statusReason: 'take-profit: ETH at 3600 USD, at or above 3500: sold; its stop is cancelled' })
    await coingecko.setEth(2000)
    await someChecks()
    const runs = await runsOf(id)
    t.equal(runs.length, 1, 'the stop never fires after')
    t.match(runs[0], { status: 'success', trigger: { kind: 'take-profit', threshold: 3500 } })
  })

  top.test('a trailing stop follows the highest price up and fires on the way down', async (t) => {
    await coingecko.setEth(3000)
    const id = await create('trailing-stop', { ...sell, trailPercent: 10 })
    t.match(await get(id), { state: { highestPrice: 3000, stopPrice: 2700 } })
    await coingecko.setEth(3300)
    await eventually('the stop moved up', async () => ((await get(id)).state.highestPrice === 3300 ? true : undefined))
    t.match(await get(id), { state: { highestPrice: 3300, stopPrice: 2970 }, runs: 0 })
    // down, but above the moved stop (and below where it started): no sale
    await coingecko.setEth(2990)
    await someChecks()
    t.match(await get(id), { status: 'active', runs: 0, state: { price: 2990, highestPrice: 3300, stopPrice: 2970 } })
    await coingecko.setEth(2950)
    t.match(await completed(id), { runs: 1 })
    t.match(await runsOf(id), [{ status: 'success', trigger: { kind: 'trailing-stop', price: 2950, threshold: 2970 } }])
  })

  top.test('a stop order whose sale a person rejects is paused, not asked again at every check', async (t) => {
    // every swap of this key over $1 waits for a person; it decides its own (selfApprove)
    const approving = await stack.createKey(wallet, { approvalAboveUsd: 1, selfApprove: true })
    await coingecko.setEth(3000)
    const made = await call('/automations', {
      headers: keyHeaders(approving),
      body: { walletAddress: wallet, type: 'stop-loss', name: 'held', config: { ...sell, stopPrice: 2500 } },
    })
    t.equal(made.status, 201, JSON.stringify(made.body))
    const id = made.body.automation.id as string
    const runs = async () => (await call(`/automations/${id}/runs`, { headers: keyHeaders(approving) })).body.runs as any[]
    await coingecko.setEth(2400)
    const [waiting] = await eventually('the sale waiting for approval', async () => {
      const list = await runs()
      return list[0]?.status === 'awaiting_approval' ? list : undefined
    })
    const rejected = await fetch(`${stack.tradingUrl}/approvals/${waiting.approval.id}/reject`, {
      method: 'POST',
      headers: { ...keyHeaders(approving, wallet), 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'hold it' }),
    })
    t.equal(rejected.status, 200)
    const paused = await eventually('the order paused', async () => {
      const automation = (await call(`/automations/${id}`, { headers: keyHeaders(approving) })).body.automation
      return automation.status === 'paused' ? automation : undefined
    })
    t.match(
      paused.statusReason,
      /^paused: its sale was not approved \(not swapped: approval apr_\S+ was rejected by .*: hold it\); resume it to watch again$/,
    )
    await someChecks()
    t.match(await runs(), [{ status: 'skipped', trigger: { kind: 'stop-loss', price: 2400 } }], 'one run, not asked again')
  })

  top.test('a TWAP of 10 slices fills in 10 runs, each slice once', async (t) => {
    const amount = '10000003' // 10.000003 USDC: the last slice takes what the division leaves
    const id = await create('twap', { tokenIn: 'USDC', tokenOut: 'WETH', amount, duration: '10s', slices: 10 })
    const done = await completed(id)
    t.match(done, { runs: 10, state: { slicesDone: 10, filled: amount, carried: '0', skipped: 0 } })
    t.match(
      done.statusReason,
      /^the TWAP made its 10 slices: filled 10000003 of 10000003 USDC base units \(10 of 10 slices swapped, 0 not\)/,
    )
    const runs = (await runsOf(id)).reverse()
    t.equal(runs.length, 10)
    t.same(
      runs.map((r) => r.trigger.slice),
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    )
    t.ok(runs.every((r) => r.status === 'success' && r.trigger.kind === 'twap-slice' && r.trigger.slices === 10))
    t.same(
      runs.map((r) => r.amountIn),
      [...Array(9).fill('1000000'), '1000003'],
    )
    t.same(
      runs.slice(1).map((r, i) => r.scheduledFor - runs[i].scheduledFor),
      Array(9).fill(1000),
      'each slice due one slice after the one before, however late a slice ran',
    )
  })

  top.test('a TWAP slice over its price-impact limit is skipped, its amount carried (or dropped)', async (t) => {
    // big enough that the pools move: each slice's impact is over 0.01%
    const big = { tokenIn: 'USDC', tokenOut: 'WETH', amount: '200000000000', duration: '2s', slices: 2, maxImpactBps: 1 }
    const carried = await create('twap', big)
    const dropped = await create('twap', { ...big, remainder: 'drop' })
    for (const id of [carried, dropped]) {
      const done = await completed(id)
      t.match(done, { runs: 0, state: { slicesDone: 2, filled: '0', skipped: 2 } })
      const runs = (await runsOf(id)).reverse()
      t.equal(runs.length, 2)
      t.ok(runs.every((r) => r.status === 'skipped' && /^skipped: price impact [0-9.]+% over the TWAP's limit of 0\.01%/.test(r.error)))
    }
    t.same(
      (await runsOf(carried)).reverse().map((r) => r.amountIn),
      ['100000000000', '200000000000'],
      'the first slice carried into the second',
    )
    t.same(
      (await runsOf(dropped)).reverse().map((r) => r.amountIn),
      ['100000000000', '100000000000'],
      'dropped: the second slice is its own share',
    )
  })
})
