import { natsChannels, walletControlKey } from '@ats/contracts'
import { callEndpoint, openBucket } from '@ats/service-kit'
import { connect } from 'nats'
import t from 'tap'
import { parseUnits } from 'viem'
import { eventually, keyHeaders, startTrading, swapOf } from './helpers.ts'

/** What keeps the server wallet safe: default caps, the price-impact ceiling, amounts the pools cannot absorb, the kill switch. */
const fleet = await startTrading(t)
const { call, publicClient, serverWallet } = fleet
const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
const usdcOf = () => fleet.balanceOf('USDC', serverWallet)
const usdcToWeth = (amountIn: string) => ({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn })

t.test('a quote of 10^53 wei of WETH is a 422 naming the largest amount that fills, on each DEX', async (t) => {
  const huge = (10n ** 53n).toString()
  for (const dex of ['uniswap', 'camelot']) {
    const started = Date.now()
    const res = await call('GET', `/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=${huge}&dex=${dex}`)
    t.equal(res.status, 422, dex)
    const match = new RegExp(
      `^amountIn ${huge} \\(1\\.000e\\+35 WETH\\) is more than the pools on ${dex} can absorb from WETH to USDC: at most (\\d+) \\(`,
    ).exec(res.body.error)
    t.ok(match, `${dex}: ${res.body.error} (${Date.now() - started} ms)`)
    const fillable = BigInt(match![1]!)
    t.ok(fillable > 0n && fillable < 10n ** 53n)
    const whole = await call('GET', `/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=${fillable}&dex=${dex}`)
    t.equal(whole.status, 200, `${dex}: the named amount fills`)
    t.equal(whole.body.exceedsPriceImpactCeiling, true, `${dex}: at an impact of ${whole.body.priceImpactBps} bps`)
    const more = await call('GET', `/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=${fillable + fillable / 100n}&dex=${dex}`)
    t.equal(more.status, 422, `${dex}: 1% more does not`)
  }
})

t.test('quotes say whether their impact is over the default ceiling of 15%', async (t) => {
  const small = await call('GET', `/swap/quote?tokenIn=GMX&tokenOut=WETH&amountIn=${parseUnits('10', 18)}`)
  t.match(small.body, { priceImpactCeilingBps: 1500, exceedsPriceImpactCeiling: false })
  // 5000 GMX into a pool of 10000: about a third below the mid price
  const large = await call('GET', `/swap/quote?tokenIn=GMX&tokenOut=WETH&amountIn=${parseUnits('5000', 18)}`)
  t.equal(large.status, 200)
  t.ok(large.body.priceImpactBps > 1500, `impact ${large.body.priceImpactBps} bps`)
  t.match(large.body, { priceImpactCeilingBps: 1500, exceedsPriceImpactCeiling: true })
})

t.test('a swap over the impact ceiling is a 422 naming the impact and the ceiling; nothing is sent', async (t) => {
  const [nonce, gmx] = [await nonceOf(), await fleet.balanceOf('GMX', serverWallet)]
  const body = { tokenIn: 'GMX', tokenOut: 'WETH', amountIn: parseUnits('5000', 18).toString() }
  const res = await call('POST', '/swap/execute', { body })
  t.equal(res.status, 422)
  t.match(
    res.body.error,
    /the price impact of this swap is [0-9.]+% \([0-9]+ bps\), over the default limit of 15% \(1500 bps\) \(its policy sets none\)/,
  )
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const { id: agentKey } = await fleet.createKey()
  await t.rejects(
    callEndpoint(
      nc,
      natsChannels(fleet.base.NATS_NAMESPACE!).trading.execute,
      { ...body, slippageBps: 50, idempotencyKey: 'impact:1' },
      { identity: { keyId: agentKey, ownerId: agentKey }, timeoutMs: 30_000 },
    ),
    { statusCode: 422, message: /over the default limit of 15%/ },
    "the agent's swap over NATS is refused the same way",
  )
  t.equal(await nonceOf(), nonce, 'no transaction')
  t.equal(await fleet.balanceOf('GMX', serverWallet), gmx, 'no GMX left the wallet')
})

t.test("a key's policy sets its own ceiling (maxPriceImpactBps), and admin checks it", async (t) => {
  const strict = await fleet.createKey({ maxPriceImpactBps: 50, maxUsdPerSwap: 100_000, maxUsdPerDay: 100_000 })
  const nonce = await nonceOf()
  // 30,000 USDC into a pool of 3,000,000: about 1% below the mid price
  const res = await call('POST', '/swap/execute', { body: usdcToWeth('30000000000'), keyId: strict.id })
  t.equal(res.status, 422)
  t.match(
    res.body.error,
    new RegExp(
      `spend policy of key ${strict.id}: the price impact of this swap is [0-9.]+% \\([0-9]+ bps\\), over its limit of 0\\.5% \\(50 bps\\)`,
    ),
  )
  t.equal(await nonceOf(), nonce)
  t.equal((await call('POST', '/swap/execute', { body: usdcToWeth('100000000'), keyId: strict.id })).status, 200, 'a small swap passes')
  for (const bad of [0, 10_001, 1.5]) {
    await t.rejects(fleet.createKey({ maxPriceImpactBps: bad }), /400/, `maxPriceImpactBps ${bad}`)
  }
})

t.test('a new key without a policy is held to $500 a swap and $500 a day: ten concurrent $100 swaps move exactly $500', async (t) => {
  const fresh = await fleet.createKey()
  const over = await call('POST', '/swap/execute', { body: usdcToWeth('600000000'), keyId: fresh.id })
  t.equal(over.status, 403)
  t.match(over.body.error, /this swap is worth \$600\.00, over the default limit of \$500\.00 per swap \(its policy sets none\)/)
  const before = await usdcOf()
  const results = await Promise.all(
    Array.from({ length: 10 }, () => call('POST', '/swap/execute', { body: usdcToWeth('100000000'), keyId: fresh.id })),
  )
  t.same(results.map((r) => r.status).sort(), [200, 200, 200, 200, 200, 403, 403, 403, 403, 403])
  for (const refused of results.filter((r) => r.status === 403)) {
    t.match(refused.body.error, /would bring today's swaps and launches \(UTC\) to \$600\.00, over the default limit of \$500\.00 per day/)
  }
  t.equal(await usdcOf(), before - 500_000_000n, 'the server wallet spent $500 for this key, no more')
  t.equal(
    (await call('POST', '/swap/execute', { body: usdcToWeth('1000000'), keyId: fresh.id })).status,
    403,
    'not even a dollar more today',
  )
})

t.test('SPEND_UNLIMITED=true lifts the default caps', async (t) => {
  const unlimited = await fleet.replica(t, { SPEND_UNLIMITED: 'true' })
  const fresh = await fleet.createKey()
  t.equal(
    (await call('POST', '/swap/execute', { body: usdcToWeth('600000000'), keyId: fresh.id })).status,
    403,
    'refused with the defaults',
  )
  const res = await fetch(`${unlimited.url}/swap/execute`, {
    method: 'POST',
    headers: { ...keyHeaders(fresh.id), 'content-type': 'application/json' },
    body: JSON.stringify(usdcToWeth('600000000')),
  })
  t.equal(res.status, 200, 'made where the setting says so')
})

t.test('the kill switch: while paused, execute, NATS swaps and launches answer 423 and nothing is sent; resume lifts it', async (t) => {
  const admin = (path: string, body?: unknown) =>
    fetch(`${fleet.admin.url}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: { ...keyHeaders('key_test_admin', 'admin'), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    }).then(async (res) => ({ status: res.status, body: (await res.json()) as any }))
  t.same((await admin('/admin/wallet')).body, { paused: false, reason: null, since: null, by: null }, 'never paused')
  const paused = await admin('/admin/wallet/pause', { reason: 'incident 42' })
  t.match(paused.body, { paused: true, reason: 'incident 42', since: Number, by: 'key_test_admin' })
  const since = new Date(paused.body.since).toISOString()
  const nonce = await nonceOf()
  const refused = await eventually('trading to see the pause', async () => {
    const res = await call('POST', '/swap/execute', { body: usdcToWeth('1000000') })
    return res.status === 423 ? res : undefined
  })
  t.equal(
    refused.body.error,
    `the server wallet is paused (since ${since}, by key_test_admin): incident 42; an admin resumes it with POST /admin/wallet/resume`,
  )
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const { execute } = natsChannels(fleet.base.NATS_NAMESPACE!).trading
  const { id: agentKey } = await fleet.createKey()
  const request = { ...usdcToWeth('1000000'), slippageBps: 50, idempotencyKey: 'paused:1' }
  await t.rejects(callEndpoint(nc, execute, request, { identity: { keyId: agentKey, ownerId: agentKey }, timeoutMs: 30_000 }), {
    statusCode: 423,
    message: /incident 42/,
  })
  const launch = await call('POST', '/launchpad/tokens', { body: { name: 'Paused', symbol: 'PAUSED', supply: '1' } })
  t.equal(launch.status, 423)
  t.equal((await call('GET', '/swap/quote?tokenIn=USDC&tokenOut=WETH&amountIn=1000000')).status, 200, 'quotes go on')
  t.equal(await nonceOf(), nonce, 'nothing was sent')

  // an entry nobody can read: spends fail safe
  const bucket = await openBucket(nc, `${fleet.base.NATS_NAMESPACE}-wallet-control`)
  await bucket.put(walletControlKey, new TextEncoder().encode('not json'))
  const unknown = await eventually('trading to refuse spends it cannot check', async () => {
    const res = await call('POST', '/swap/execute', { body: usdcToWeth('1000000') })
    return res.status === 503 ? res : undefined
  })
  t.match(unknown.body.error, /kill switch cannot be read right now/)

  t.match((await admin('/admin/wallet/resume', {})).body, { paused: false, reason: null, by: 'key_test_admin' })
  await eventually('trading to see the resume', async () =>
    (await call('POST', '/swap/execute', { body: usdcToWeth('1000000') })).status === 200 ? true : undefined,
  )
  // the same idempotency key refused while paused is not stored as refused: it swaps now
  const again = swapOf(await callEndpoint(nc, execute, request, { identity: { keyId: agentKey, ownerId: agentKey }, timeoutMs: 30_000 }))
  t.equal(again.success, true)
})
