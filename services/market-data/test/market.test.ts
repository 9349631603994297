import { compareSchemaWithDatabase } from '@ats/service-kit/testing'
import { coreAssets, marketRoutes, natsChannels, type Endpoint } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import { connect } from 'nats'
import t from 'tap'
import { Compile } from 'typebox/compile'
import { startMarket } from './helpers.ts'

/** One devnet and one market-data service on its local sources, as `pnpm start` runs it; a short cache ttl. */
const ttlMs = 800
const market = await startMarket(t, { env: { MARKET_CACHE_TTL_MS: String(ttlMs) } })
const { call, devnet } = market
const shapeOf = (route: keyof typeof marketRoutes) => Compile(marketRoutes[route].schema.response[200]!)
const account = devnet.accounts[0]!.address

t.test('the database matches schema.prisma', async (t) => {
  const schema = new URL('../prisma/schema.prisma', import.meta.url).pathname
  t.same(await compareSchemaWithDatabase(schema, market.base.DATABASE_URL!, 'market_data'), [])
})

t.test('prices of the seven core assets come from the devnet pools', async (t) => {
  const res = await call('/market/prices')
  t.equal(res.status, 200)
  t.ok(shapeOf('prices').Check(res.body), 'the contract shape')
  t.same(Object.keys(res.body.prices).sort(), [...coreAssets].sort())
  t.ok(Math.abs(res.body.prices.ETH.price - 3000) < 30, `ETH ${res.body.prices.ETH.price}`)
  t.ok(Math.abs(res.body.prices.BTC.price - 60000) < 600, `BTC ${res.body.prices.BTC.price}`)
})

t.test('cached is false, then true within the ttl, then false again after it', async (t) => {
  // wait out whatever earlier tests cached
  await new Promise((resolve) => setTimeout(resolve, ttlMs + 50))
  const first = await call('/market/prices')
  t.equal(first.body.cached, false)
  const second = await call('/market/prices')
  t.equal(second.body.cached, true)
  t.equal(second.body.updatedAt, first.body.updatedAt, 'the same answer')
  await new Promise((resolve) => setTimeout(resolve, ttlMs + 50))
  const third = await call('/market/prices')
  t.equal(third.body.cached, false)
  t.ok(third.body.updatedAt > first.body.updatedAt)
})

t.test('trending lists at most 10 devnet pools with the spec fields', async (t) => {
  const res = await call('/market/trending')
  t.equal(res.status, 200)
  t.ok(shapeOf('trending').Check(res.body), 'the contract shape')
  t.ok(res.body.trending.length > 0 && res.body.trending.length <= 10, `${res.body.trending.length} pools`)
  t.match(res.body.trending[0], { name: String, basePrice: /^[0-9.]+$/, volume24h: /^[0-9.]+$/, change24h: /^-?[0-9.]+$/ })
  t.equal(typeof (await call('/market/trending')).body.cached, 'boolean')
})

t.test('NFTs of a devnet account: spam hidden unless includeHidden=true; a bad address is a 400', async (t) => {
  const visible = await call(`/nfts/${account}`)
  t.equal(visible.status, 200)
  t.ok(shapeOf('nfts').Check(visible.body))
  t.ok(visible.body.nfts.length > 0)
  t.ok(
    visible.body.nfts.every((nft: { isSpam: boolean }) => !nft.isSpam),
    'no spam by default',
  )
  const all = await call(`/nfts/${account}?includeHidden=true`)
  t.ok(
    all.body.nfts.some((nft: { isSpam: boolean }) => nft.isSpam),
    'the spam collection with includeHidden',
  )
  t.ok(all.body.nfts.length > visible.body.nfts.length)
  const bad = await call('/nfts/0x1234')
  t.equal(bad.status, 400)
  t.match(bad.body.error, /address/)
  t.equal((await call(`/nfts/${account}?includeHidden=maybe`)).status, 400)
})

t.test('predictions: top by volume with a limit, search with q required, one by condition id or 404', async (t) => {
  const top = await call('/predictions/top')
  t.equal(top.status, 200)
  t.ok(shapeOf('topPredictions').Check(top.body))
  t.equal(top.body.markets.length, 10, 'the default limit')
  const volumes = top.body.markets.map((m: { volume: number }) => m.volume)
  t.same(
    volumes,
    [...volumes].sort((a, b) => b - a),
    'highest volume first',
  )
  t.equal((await call('/predictions/top?limit=3')).body.markets.length, 3)
  t.equal((await call('/predictions/top?limit=101')).status, 400)

  const missing = await call('/predictions/search')
  t.equal(missing.status, 400)
  t.match(missing.body.error, /Missing required params: q/)
  t.equal((await call('/predictions/search?q=%20%20')).status, 400)
  const word = top.body.markets[0].question
    .split(/\s+/)
    .find((w: string) => w.length > 5)!
    .replace(/[^A-Za-z0-9]/g, '')
  const found = await call(`/predictions/search?q=${encodeURIComponent(word)}`)
  t.equal(found.status, 200)
  t.ok(
    found.body.markets.some((m: { conditionId: string }) => m.conditionId === top.body.markets[0].conditionId),
    `"${word}" finds the market`,
  )

  const one = await call(`/predictions/${top.body.markets[0].conditionId}`)
  t.equal(one.status, 200)
  t.same(one.body.market, top.body.markets[0])
  const unknown = await call(`/predictions/0x${'ab'.repeat(32)}`)
  t.equal(unknown.status, 404)
  t.match(unknown.body, { error: /not found/ })
  t.equal((await call('/predictions/not-a-condition')).status, 400)
})

t.test('bridge: chains, a quote with fromChainId defaulting to 42161, missing params named', async (t) => {
  const chains = await call('/bridge/chains')
  t.equal(chains.status, 200)
  t.ok(shapeOf('bridgeChains').Check(chains.body))
  t.ok(chains.body.chains.some((c: { id: number }) => c.id === 42161))
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
  const base = chains.body.chains.find((c: { id: number }) => c.id === 8453)
  t.ok(base, 'Base is a destination')
  const baseUsdc = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'
  const quote = await call(`/bridge/quote?toChainId=8453&fromToken=${usdc}&toToken=${baseUsdc}&amount=100000000&userAddress=${account}`)
  t.equal(quote.status, 200, JSON.stringify(quote.body))
  t.ok(shapeOf('bridgeQuote').Check(quote.body))
  t.match(quote.body, { fromChainId: 42161, toChainId: 8453, fromAmount: '100000000', source: 'model' })
  t.ok(BigInt(quote.body.toAmount) < 100000000n && BigInt(quote.body.toAmount) > 99000000n, `100 USDC arrive as ${quote.body.toAmount}`)

  const missing = await call('/bridge/quote?fromToken=' + usdc)
  t.equal(missing.status, 400)
  t.equal(missing.body.error, 'Missing required params: toChainId, toToken, amount, userAddress (querystring)')
  const zero = await call(`/bridge/quote?toChainId=8453&fromToken=${usdc}&toToken=${baseUsdc}&amount=0&userAddress=${account}`)
  t.equal(zero.status, 400)
  t.match(zero.body.error, /amount must be greater than 0/)
})

t.test('a route the service does not have is a 404 {error}', async (t) => {
  const res = await call('/market/nothing')
  t.equal(res.status, 404)
  t.type(res.body.error, 'string')
})

t.test("over NATS, the agent's tools get the same answers, with the HTTP defaults applied", async (t) => {
  const nc = await connect({ servers: market.base.NATS_URL! })
  t.teardown(() => nc.close())
  const channels = natsChannels(market.base.NATS_NAMESPACE!).market
  const identity = { keyId: 'key_agent', ownerId: 'key_agent' }
  const call = <Req, Rep>(endpoint: Endpoint<Req, Rep>, request: Req) =>
    callEndpoint(nc, endpoint, request, { identity, timeoutMs: 10_000 })

  t.same(Object.keys((await call(channels.prices, {})).prices).sort(), [...coreAssets].sort())
  t.ok((await call(channels.trending, {})).trending.length > 0)
  const nfts = await call(channels.nfts, { address: account })
  t.ok(nfts.nfts.length > 0 && nfts.nfts.every((nft) => !nft.isSpam), 'spam hidden by default')
  t.ok((await call(channels.nfts, { address: account, includeHidden: true })).nfts.some((nft) => nft.isSpam))
  const top = await call(channels.topPredictions, {})
  t.equal(top.markets.length, 10, 'the default limit')
  t.ok((await call(channels.searchPredictions, { q: 'election', limit: 3 })).markets.length <= 3)
  t.same((await call(channels.prediction, { conditionId: top.markets[0]!.conditionId })).market, top.markets[0])
  await t.rejects(call(channels.prediction, { conditionId: `0x${'cd'.repeat(32)}` }), { statusCode: 404, message: /not found/ })
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
  const quote = await call(channels.bridgeQuote, {
    toChainId: 8453,
    fromToken: usdc,
    toToken: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    amount: '100000000',
    userAddress: account,
  })
  t.match(quote, { fromChainId: 42161, toChainId: 8453 }, 'fromChainId defaults to 42161')
  await t.rejects(call(channels.bridgeQuote, { toChainId: 8453, fromToken: usdc, toToken: usdc, amount: '0', userAddress: account }), {
    statusCode: 400,
    message: /amount must be greater than 0/,
  })
  t.ok((await call(channels.bridgeChains, {})).chains.length > 1)
})
