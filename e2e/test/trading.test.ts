import { erc20Abi } from '@ats/chain'
import t from 'tap'
import { parseUnits, type Address } from 'viem'
import { gatewayService } from '@ats/gateway/service'
import { startService } from '@ats/service-kit/testing'
import { tradingService } from '@ats/trading/service'
import { startTradingFleet } from './fleet.ts'

/** Swaps, positions and the launchpad through the gateway, with keys made by admin, as a client sees them. */
const fleet = await startTradingFleet(t)
const { request, createKey, publicClient, serverWallet } = fleet
const trader = await createKey('readwrite', 'trader')
const reader = await createKey('readonly', 'dashboard')
const token = (symbol: string) => fleet.devnet.book.tokens.find((x) => x.symbol === symbol)!.address
const balanceOf = (symbol: string, owner: Address) => publicClient.readContract({ address: token(symbol), abi: erc20Abi, functionName: 'balanceOf', args: [owner] })

t.test('quotes on both DEXes through the gateway; readonly keys may not swap', async (t) => {
  for (const dex of ['uniswap', 'camelot']) {
    const res = await request(`/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1000000000000000000&dex=${dex}`, { key: trader.key })
    t.equal(res.status, 200, dex)
    t.ok(BigInt(res.body.amountOut) > 0n, `${dex}: amountOut ${res.body.amountOut}`)
    t.ok(res.headers.get('x-request-id'))
  }
  const missing = await request('/swap/quote?tokenIn=WETH', { key: trader.key })
  t.equal(missing.status, 400)
  t.match(missing.body.error, /Missing required params: tokenOut, amountIn/)
  t.equal((await request('/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1', { key: reader.key })).status, 403)
  t.equal((await request('/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1')).status, 401)
})

t.test('an execute through the gateway is a mined swap that moved the reported amounts', async (t) => {
  for (const dex of ['uniswap', 'camelot']) {
    const before = await balanceOf('ARB', serverWallet)
    const res = await request('/swap/execute', {
      method: 'POST',
      key: trader.key,
      body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '8000000', dex },
      headers: { 'idempotency-key': `e2e-${dex}` },
    })
    t.equal(res.status, 200, dex)
    t.equal(res.body.success, true)
    t.equal((await publicClient.getTransactionReceipt({ hash: res.body.hash })).status, 'success')
    t.equal(await balanceOf('ARB', serverWallet), before + BigInt(res.body.amountOut), `${dex}: ~10 ARB arrived (${res.body.amountOut})`)
  }
})

t.test('positions for a readonly key', async (t) => {
  const res = await request('/portfolio/positions', { key: reader.key })
  t.equal(res.status, 200)
  t.equal(res.body.aave.totalCollateralBase, parseUnits('10000', 8).toString())
  t.equal(res.body.gmx[0].side, 'long')
})

t.test('a key capped at $5 a swap gets 403 for a $50 swap, and the chain shows no transaction', async (t) => {
  const created = await request('/admin/keys', {
    method: 'POST',
    key: 'atsk_gatewayTestBootstrapKey-00000000',
    body: { tier: 'readwrite', label: 'capped bot', policy: { maxUsdPerSwap: 5 } },
  })
  t.equal(created.status, 201)
  const nonce = await publicClient.getTransactionCount({ address: serverWallet })
  const res = await request('/swap/execute', { method: 'POST', key: created.body.key, body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000' } })
  t.equal(res.status, 403)
  t.match(res.body.error, /over its limit of \$5\.00 per swap/)
  t.equal(await publicClient.getTransactionCount({ address: serverWallet }), nonce)
})

t.test('a launched token reads back from the chain', async (t) => {
  const res = await request('/launchpad/tokens', { method: 'POST', key: trader.key, body: { name: 'Gateway Token', symbol: 'GATE', supply: '21000000', decimals: 8 } })
  t.equal(res.status, 201)
  const read = await request(`/launchpad/tokens/${res.body.address}`, { key: trader.key })
  t.match(read.body, { name: 'Gateway Token', symbol: 'GATE', decimals: 8, supply: '2100000000000000' })
  t.equal(await publicClient.readContract({ address: res.body.address, abi: erc20Abi, functionName: 'totalSupply' }), 2_100_000_000_000_000n)
})

t.test('without a server wallet an execute through the gateway is 503, and quotes still work', async (t) => {
  // a second trading service without SERVER_WALLET_PRIVATE_KEY, behind a gateway of its own
  const trading = await startService(t, tradingService, fleet.tradingEnv)
  const gateway = await startService(t, gatewayService, { ...fleet.gatewayEnv, TRADING_URL: trading.url })
  const call = (path: string, init: RequestInit = {}) =>
    fetch(`${gateway.url}${path}`, { ...init, headers: { authorization: `Bearer ${trader.key}`, 'content-type': 'application/json' } })
  const res = await call('/swap/execute', { method: 'POST', body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' }) })
  t.equal(res.status, 503)
  t.same(await res.json(), { error: 'server wallet not configured' })
  t.equal((await call('/swap/quote?tokenIn=USDC&tokenOut=WETH&amountIn=1000000')).status, 200)
})
