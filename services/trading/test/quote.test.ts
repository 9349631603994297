import { natsChannels } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import { compareSchemaWithDatabase } from '@ats/service-kit/testing'
import { connect } from 'nats'
import { SEEDED_LENDING, SEEDED_PERP } from '@ats/devnet'
import t from 'tap'
import { createWalletClient, http, parseUnits, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { startTrading } from './helpers.ts'

/** One devnet and one trading service for every read-only behaviour: quotes, positions, prepare. */
const fleet = await startTrading(t)
const { call } = fleet

t.test('the database matches schema.prisma', async (t) => {
  const schema = new URL('../prisma/schema.prisma', import.meta.url).pathname
  t.same(await compareSchemaWithDatabase(schema, fleet.base.DATABASE_URL!, 'trading'), [])
})

t.test('a quote on each DEX comes from its quoter, with the path and a price near the pool price', async (t) => {
  for (const dex of ['uniswap', 'camelot']) {
    const res = await call('GET', `/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=${parseUnits('1', 18)}&dex=${dex}`)
    t.equal(res.status, 200, dex)
    t.match(res.body, { dex, tokenIn: 'WETH', tokenOut: 'USDC', amountIn: '1000000000000000000', route: ['WETH', 'USDC'] })
    const out = BigInt(res.body.amountOut)
    // 1 WETH at 3000 USDC, less the fee (0.05% on Uniswap's 500 tier; Algebra's dynamic fee) and a tiny impact
    t.ok(out > parseUnits('2950', 6) && out < parseUnits('3000', 6), `${dex}: 1 WETH -> ${res.body.amountOut} USDC`)
    t.equal(res.body.pools.length, 1)
    if (dex === 'uniswap') t.same(res.body.fees, [500], 'the seeded 0.05% tier')
  }
  const byAddress = await call('GET', `/swap/quote?tokenIn=${fleet.token('USDC').address}&tokenOut=weth&amountIn=1000000`)
  t.equal(byAddress.status, 200, 'tokens by address or symbol in any case')
  t.match(byAddress.body, { dex: 'uniswap', tokenIn: 'USDC', tokenOut: 'WETH' })
})

t.test('a larger trade has a larger price impact; a tiny one has none', async (t) => {
  for (const dex of ['uniswap', 'camelot']) {
    const impact = async (weth: string) =>
      (await call('GET', `/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=${parseUnits(weth, 18)}&dex=${dex}`)).body
        .priceImpactBps as number
    const [tiny, small, large] = [await impact('0.001'), await impact('1'), await impact('100')]
    t.equal(tiny, 0, `${dex}: 0.001 WETH moves nothing`)
    t.ok(large > small, `${dex}: 100 WETH (${large} bps) > 1 WETH (${small} bps)`)
    // 100 WETH into a 1000 WETH full-range pool: about 10% less than the mid price
    t.ok(large > 800 && large < 1100, `${dex}: 100 WETH impact ${large} bps`)
  }
})

t.test('without a direct pool the route goes through WETH', async (t) => {
  for (const dex of ['uniswap', 'camelot']) {
    const res = await call('GET', `/swap/quote?tokenIn=GMX&tokenOut=USDC&amountIn=${parseUnits('10', 18)}&dex=${dex}`)
    t.equal(res.status, 200, dex)
    t.same(res.body.route, ['GMX', 'WETH', 'USDC'])
    t.equal(res.body.pools.length, 2)
    // 10 GMX at 0.01 WETH = 0.1 WETH = 300 USDC, less two fees
    const out = BigInt(res.body.amountOut)
    t.ok(out > parseUnits('285', 6) && out < parseUnits('300', 6), `${dex}: 10 GMX -> ${res.body.amountOut} USDC`)
  }
})

t.test('bad quotes are 400s that say what is wrong; no route is a 422', async (t) => {
  const missing = await call('GET', '/swap/quote?tokenOut=USDC')
  t.equal(missing.status, 400)
  t.match(missing.body.error, /Missing required params: .*tokenIn.*amountIn|Missing required params: .*amountIn.*tokenIn/)
  const cases: Array<[string, RegExp]> = [
    ['tokenIn=NOPE&tokenOut=USDC&amountIn=1', /tokenIn: unknown token "NOPE"/],
    ['tokenIn=WETH&tokenOut=0x000000000000000000000000000000000000dEaD&amountIn=1', /tokenOut: .* is not an ERC-20/],
    ['tokenIn=WETH&tokenOut=USDC&amountIn=1.5', /amountIn must be a positive integer/],
    ['tokenIn=WETH&tokenOut=USDC&amountIn=-3', /amountIn must be a positive integer/],
    ['tokenIn=WETH&tokenOut=USDC&amountIn=0', /amountIn must be greater than 0/],
    ['tokenIn=WETH&tokenOut=USDC&amountIn=1&dex=sushi', /dex must be equal to one of the allowed values: uniswap, camelot/],
    ['tokenIn=WETH&tokenOut=weth&amountIn=1', /the same token/],
  ]
  for (const [query, error] of cases) {
    const res = await call('GET', `/swap/quote?${query}`)
    t.equal(res.status, 400, query)
    t.match(res.body.error, error, query)
  }
  // DAI has no pool on either DEX, not even with WETH
  const none = await call('GET', '/swap/quote?tokenIn=DAI&tokenOut=USDC&amountIn=1000')
  t.equal(none.status, 422)
  t.match(none.body.error, /no route from DAI to USDC on uniswap/)
})

t.test('positions: the seeded Aave account and GMX position of the server wallet', async (t) => {
  const res = await call('GET', '/portfolio/positions')
  t.equal(res.status, 200)
  t.equal(res.body.address, fleet.serverWallet)
  t.same(res.body.aave, {
    totalCollateralBase: SEEDED_LENDING.totalCollateralBase.toString(),
    totalDebtBase: SEEDED_LENDING.totalDebtBase.toString(),
    availableBorrowsBase: SEEDED_LENDING.availableBorrowsBase.toString(),
    healthFactor: SEEDED_LENDING.healthFactor.toString(),
    ltv: SEEDED_LENDING.ltv.toString(),
  })
  t.equal(res.body.gmx.length, 1)
  const [perp] = res.body.gmx
  t.match(perp, {
    market: fleet.token('WETH').address,
    side: 'long',
    size: SEEDED_PERP.sizeInUsd.toString(),
    collateral: SEEDED_PERP.collateralAmount.toString(),
  })
  t.equal(perp.entryPrice, parseUnits('3000', 30).toString(), 'entry $3,000 per ETH, 30 decimals')
  // marked at the pool's mid price, which is the seeded 3000 (give or take rounding and earlier tests' trades)
  t.ok(BigInt(perp.pnl) > -parseUnits('1', 30) && BigInt(perp.pnl) < parseUnits('1', 30), `pnl ${perp.pnl}: within a dollar of 0`)

  const other = await call('GET', `/portfolio/positions?address=${fleet.devnet.accounts[5]!.address}`)
  t.equal(other.status, 200)
  t.same(other.body.gmx, [])
  t.equal(other.body.aave.totalCollateralBase, '0')
  const bad = await call('GET', '/portfolio/positions?address=0x123')
  t.equal(bad.status, 400)
})

t.test('prepare: signed and sent by the account itself, the transactions swap at least the minimum', async (t) => {
  const account = privateKeyToAccount(fleet.devnet.accounts[3]!.privateKey as Hex)
  for (const dex of ['uniswap', 'camelot']) {
    const body = { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '250000000', dex, from: account.address }
    const res = await call('POST', '/swap/prepare', { body })
    t.equal(res.status, 200, dex)
    t.same(res.body.simulation, { ok: true }, `${dex}: simulated`)
    t.same(
      res.body.transactions.map((tx: { kind: string }) => tx.kind),
      ['approval', 'swap'],
      `${dex}: an approval first (no allowance yet), then the swap`,
    )
    const wallet = createWalletClient({ account, transport: http(fleet.devnet.rpcUrl), chain: fleet.publicClient.chain })
    const before = await fleet.balanceOf('WETH', account.address)
    for (const tx of res.body.transactions) {
      const hash = await wallet.sendTransaction({ to: tx.to, data: tx.data, gas: BigInt(tx.gas), value: 0n, chain: null })
      const receipt = await fleet.publicClient.waitForTransactionReceipt({ hash, pollingInterval: 50 })
      t.equal(receipt.status, 'success', `${dex}: ${tx.kind} mined`)
    }
    const received = (await fleet.balanceOf('WETH', account.address)) - before
    t.ok(received >= BigInt(res.body.amountOutMinimum), `${dex}: received ${received} >= minimum ${res.body.amountOutMinimum}`)
  }
  // nothing was sent by the service: the server wallet's nonce did not move
})

t.test('prepare reports what would fail, and sends nothing', async (t) => {
  const poor = '0x00000000000000000000000000000000000000b0'
  const nonce = await fleet.publicClient.getTransactionCount({ address: fleet.serverWallet })
  const res = await call('POST', '/swap/prepare', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000', from: poor } })
  t.equal(res.status, 200)
  t.equal(res.body.simulation.ok, false)
  t.match(res.body.simulation.error, /holds 0 USDC; the swap needs 1/)
  t.equal(await fleet.publicClient.getTransactionCount({ address: fleet.serverWallet }), nonce, 'no transaction from the server wallet')
  const noFrom = await call('POST', '/swap/prepare', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' } })
  t.equal(noFrom.status, 400)
  t.match(noFrom.body.error, /Missing required params: from/)
})

t.test('a chain that does not answer is a 502 that says so, not a cached "no route"', async (t) => {
  const { baseTestEnv, startService } = await import('@ats/service-kit/testing')
  const { tradingService } = await import('../src/service.ts')
  const { keyHeaders } = await import('./helpers.ts')
  const base = await baseTestEnv(t)
  const dead = await startService(t, tradingService, { ...base, ...fleet.chainEnv, RPC_URL: 'http://127.0.0.1:9' })
  const res = await fetch(`${dead.url}/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1000`, { headers: keyHeaders('key_test') })
  t.equal(res.status, 502)
  t.match(((await res.json()) as { error: string }).error, /^the chain did not answer: /)
})

t.test('over NATS, tokens lists the registry by symbol with decimals: what the agent turns "1.5 WETH" into base units with', async (t) => {
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const list = await callEndpoint(nc, natsChannels(fleet.base.NATS_NAMESPACE!).trading.tokens, {})
  t.equal(list.chainId, 31337)
  t.match(
    list.tokens.find((token) => token.symbol === 'USDC'),
    { decimals: 6, address: fleet.token('USDC').address },
  )
  t.match(
    list.tokens.find((token) => token.symbol === 'WETH'),
    { decimals: 18, address: fleet.token('WETH').address },
  )
  t.ok(
    list.tokens.some((token) => token.symbol === 'DAI'),
    'every token of the book, pooled or not',
  )
})
