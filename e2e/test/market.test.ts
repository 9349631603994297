import { coreAssets } from '@ats/contracts'
import { startTestDevnet } from '@ats/devnet'
import { marketDataService } from '@ats/market-data/service'
import { baseTestEnv, startService, testInfra } from '@ats/service-kit/testing'
import t from 'tap'
import { startFleet } from './fleet.ts'

/** Market data through the gateway on the devnet, with keys made by admin, as a client sees it. */
const { devnet, chainEnv: chain } = await startTestDevnet(t)
const env = await baseTestEnv(t)
const market = await startService(t, marketDataService, { ...env, ...chain, REDIS_URL: (await testInfra()).redisUrl })
const { request, createKey } = await startFleet(t, { env, gatewayEnv: { ...chain, MARKET_DATA_URL: market.url } })
const reader = await createKey('readonly', 'dashboard')
const holder = devnet.accounts[0]!.address
const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address

t.test('every market-data route answers the spec shape through the gateway with a readonly key', async (t) => {
  const prices = await request('/market/prices', { key: reader.key })
  t.equal(prices.status, 200)
  t.same(Object.keys(prices.body.prices).sort(), [...coreAssets].sort())
  t.match(prices.body.prices.ETH, { price: Number, change24h: Number })
  t.type(prices.body.cached, 'boolean')

  const trending = await request('/market/trending', { key: reader.key })
  t.equal(trending.status, 200)
  t.ok(trending.body.trending.length <= 10)
  t.match(trending.body.trending[0], { name: String, basePrice: String, volume24h: String, change24h: String })

  const nfts = await request(`/nfts/${holder}`, { key: reader.key })
  t.equal(nfts.status, 200)
  t.match(nfts.body.nfts[0], { contractAddress: String, tokenId: String, name: String, collection: String, imageUrl: String, isSpam: false })
  const hidden = await request(`/nfts/${holder}?includeHidden=true`, { key: reader.key })
  t.ok(hidden.body.nfts.length > nfts.body.nfts.length, 'spam shows with includeHidden=true')

  const top = await request('/predictions/top?limit=5', { key: reader.key })
  t.equal(top.status, 200)
  t.equal(top.body.markets.length, 5)
  const one = await request(`/predictions/${top.body.markets[0].conditionId}`, { key: reader.key })
  t.same(one.body.market, top.body.markets[0])
  const search = await request('/predictions/search?q=bitcoin', { key: reader.key })
  t.equal(search.status, 200)
  t.ok(Array.isArray(search.body.markets))

  const chains = await request('/bridge/chains', { key: reader.key })
  t.ok(chains.body.chains.length > 1)
  const quote = await request(`/bridge/quote?toChainId=10&fromToken=${usdc}&toToken=0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85&amount=50000000&userAddress=${holder}`, { key: reader.key })
  t.equal(quote.status, 200, JSON.stringify(quote.body))
  t.match(quote.body, { fromChainId: 42161, toChainId: 10, fromAmount: '50000000' })
})

t.test('through the gateway: no key 401, bad input 400 {error} that says what is wrong, unknown market 404', async (t) => {
  t.equal((await request('/market/prices')).status, 401)
  const bad = await request('/nfts/not-an-address', { key: reader.key })
  t.equal(bad.status, 400)
  t.type(bad.body.error, 'string')
  const missing = await request('/bridge/quote', { key: reader.key })
  t.equal(missing.status, 400)
  t.equal(missing.body.error, 'Missing required params: toChainId, fromToken, toToken, amount, userAddress (querystring)')
  t.equal((await request('/predictions/search', { key: reader.key })).status, 400)
  t.equal((await request(`/predictions/0x${'0'.repeat(64)}`, { key: reader.key })).status, 404)
})
