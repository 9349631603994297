import { BridgeChain, BridgeQuote, Nft, PredictionMarket, PriceEntry, TrendingPool } from '@ats/contracts'
import { createHttpClient } from '@ats/service-kit'
import t from 'tap'
import type { TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import { alchemyNfts } from '../src/providers/alchemy.ts'
import { coingeckoPrices } from '../src/providers/coingecko.ts'
import { decimalString } from '../src/providers/decimal.ts'
import { geckoTerminalTrending } from '../src/providers/geckoterminal.ts'
import { lifiBridge } from '../src/providers/lifi.ts'
import { polymarketPredictions } from '../src/providers/polymarket.ts'
import { fixture, startUpstreams } from './upstreams.ts'

/** The public adapters against the local server that plays the APIs with their recorded shapes. */
const upstreams = await startUpstreams(t)
const client = (name: string, baseUrl: string, timeoutMs = 2000) => {
  const http = createHttpClient({ name, baseUrl, timeoutMs, retries: 1 })
  t.teardown(() => http.close())
  return http
}
const valid = (schema: TSchema, values: unknown[]) => {
  const check = Compile(schema)
  return values.every((value) => check.Check(value))
}
const user = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266' as const
t.beforeEach(() => upstreams.reset())

t.test('CoinGecko: one call for the seven assets; a null 24h change is 0', async (t) => {
  const prices = await coingeckoPrices(client('coingecko', upstreams.base.coingecko)).prices()
  t.same(Object.keys(prices).sort(), ['ARB', 'BTC', 'ETH', 'GMX', 'LINK', 'USDC', 'USDT'])
  t.same(prices.ETH, { price: 3012.57, change24h: -1.4337625188 })
  t.same(prices.GMX, { price: 28.41, change24h: 0 }, 'usd_24h_change null')
  t.equal(prices.USDC!.price, 0.999912)
  t.ok(valid(PriceEntry, Object.values(prices)))
  t.equal(upstreams.calls('/simple/price'), 1)
})

t.test('GeckoTerminal: string numbers stay strings, null is "0", ranked by 24h volume, limited', async (t) => {
  const pools = await geckoTerminalTrending(client('geckoterminal', upstreams.base.geckoterminal), { network: 'arbitrum' }).trending(10)
  t.same(
    pools.map((p) => p.name),
    ['ARB / USDC', 'WETH / USDC 0.05%', 'GMX / WETH 1%'],
  )
  t.same(pools[1], {
    name: 'WETH / USDC 0.05%',
    basePrice: '3012.5712345678',
    volume24h: '45678901.234567',
    change24h: '-1.43',
    address: '0xC6962004f452bE9203591991D15f6b388e09E8D0',
    dex: 'uniswap_v3_arbitrum',
  })
  t.equal(pools[2]!.change24h, '0', 'null change')
  t.ok(valid(TrendingPool, pools))
  t.equal(
    (await geckoTerminalTrending(client('geckoterminal', upstreams.base.geckoterminal), { network: 'arbitrum' }).trending(1)).length,
    1,
  )
})

t.test('an upstream decimal in exponent or odd form becomes a plain decimal string, digit for digit', async (t) => {
  t.equal(decimalString('3012.5712345678'), '3012.5712345678', 'a plain one is kept as sent')
  t.equal(decimalString('1.5e-7'), '0.00000015')
  t.equal(decimalString('-4.56E+2'), '-456')
  t.equal(decimalString(1e21), '1000000000000000000000')
  t.equal(decimalString('.5'), '0.5')
  t.equal(decimalString('+12.'), '12')
  t.equal(decimalString(null), '0')
  t.equal(decimalString('NaN'), '0')
  t.equal(decimalString('1e999'), '0', 'no price or volume: not a thousand digits')
})

t.test('Alchemy: v3 fields mapped, spam flagged from contract.isSpam, pages followed with pageKey', async (t) => {
  const source = alchemyNfts(client('alchemy', upstreams.base.alchemy))
  const first = await source.nftsOf(user, {})
  t.equal(first.pageKey, 'page-2')
  t.same(first.nfts, [
    {
      contractAddress: '0xfAe39eC09730CA0F14262A636D2d7C5539353752',
      tokenId: '3',
      name: 'Odyssey Week 3',
      collection: 'Arbitrum Odyssey NFT',
      imageUrl: 'https://nft-cdn.alchemy.com/arb-mainnet/odyssey3',
      isSpam: false,
    },
    {
      contractAddress: '0x17DaCAD7975960833f374622fad08b90Ed67D1B5',
      tokenId: '1234',
      name: 'Smol Brains #1234',
      collection: 'Smol Brains',
      imageUrl: 'https://smolbrains.example/1234.png',
      isSpam: false,
    },
  ])
  const second = await source.nftsOf(user, { pageKey: 'page-2' })
  t.equal(second.pageKey, undefined, 'the last page')
  t.match(second.nfts, [{ tokenId: '7', collection: 'Claim Free ETH', isSpam: true, imageUrl: '' }])
  t.ok(valid(Nft, [...first.nfts, ...second.nfts]))
  await t.rejects(
    source.nftsOf(user, { pageKey: 'made-up' }),
    { statusCode: 502, message: 'alchemy answered 400 Bad Request' },
    'a pageKey Alchemy never gave',
  )
})

t.test('Alchemy: a hex token id of an older answer is a decimal one; no name falls back to the collection and id', async (t) => {
  upstreams.behave('/getNFTsForOwner', {
    body: {
      ownedNfts: [
        {
          contract: { address: '0x17dacad7975960833f374622fad08b90ed67d1b5', name: 'Smol Brains' },
          tokenId: '0x00ff',
          image: { pngUrl: 'https://png.example/255.png' },
        },
      ],
      pageKey: null,
    },
  })
  const page = await alchemyNfts(client('alchemy', upstreams.base.alchemy)).nftsOf(user, {})
  t.same(page, {
    nfts: [
      {
        contractAddress: '0x17DaCAD7975960833f374622fad08b90Ed67D1B5',
        tokenId: '255',
        name: 'Smol Brains #255',
        collection: 'Smol Brains',
        imageUrl: 'https://png.example/255.png',
        isSpam: false,
      },
    ],
  })
})

t.test('Gamma top: open markets by volume, outcomes and prices read from its JSON strings', async (t) => {
  const source = polymarketPredictions(client('polymarket', upstreams.base.gamma))
  const top = await source.top(10)
  t.same(
    top.map((m) => m.slug),
    ['fed-rate-cut-in-december-2026', 'will-bitcoin-reach-150k-by-december-31-2026', 'ethereum-flippening-2026'],
    'open markets only, by volume; one without a condition id is skipped',
  )
  t.same(top[1], {
    conditionId: '0x5f65177b394277fd294cd75650044e32ba009a95022d88a0c1d565897d72f8f1',
    question: 'Will Bitcoin reach $150,000 by December 31, 2026?',
    slug: 'will-bitcoin-reach-150k-by-december-31-2026',
    description: 'This market resolves Yes if any Binance BTC/USDT 1-minute candle closes at or above $150,000 before the end date.',
    outcomes: [
      { name: 'Yes', price: 0.135 },
      { name: 'No', price: 0.865 },
    ],
    volume: 8812345.123456,
    liquidity: 215433.5031,
    endDate: '2026-12-31T12:00:00.000Z',
    active: true,
    closed: false,
    url: 'https://polymarket.com/event/bitcoin-price-end-of-2026',
  })
  t.match(
    top[2],
    { volume: 99000, liquidity: 1200, endDate: null, description: '', url: 'https://polymarket.com/event/ethereum-flippening-2026' },
    'string volume, no volumeNum',
  )
  t.equal((await source.top(1)).length, 1)
  t.ok(valid(PredictionMarket, top))
})

t.test('Gamma search: the markets of the events found, in their order, each once, linked to their event', async (t) => {
  const source = polymarketPredictions(client('polymarket', upstreams.base.gamma))
  const found = await source.search('bitcoin', 10)
  t.same(
    found.map((m) => [m.slug, m.url]),
    [
      ['will-bitcoin-reach-150k-by-december-31-2026', 'https://polymarket.com/event/bitcoin-price-end-of-2026'],
      ['ethereum-flippening-2026', 'https://polymarket.com/event/ethereum-flippening-2026'],
      ['bitcoin-100k-2024', 'https://polymarket.com/event/bitcoin-100k-2024'],
    ],
    'closed markets too',
  )
  t.equal((await source.search('bitcoin', 2)).length, 2)
  t.same(await source.search('nothing like this', 10), [])
  t.ok(valid(PredictionMarket, found))

  const [btc, eth] = fixture<Array<Record<string, unknown>>>('gamma-markets').filter((m) => /Bitcoin/.test(String(m.question)))
  upstreams.behave('/public-search', {
    body: {
      events: [
        { slug: 'crypto-2026', markets: [eth, btc] },
        { slug: 'bitcoin-2026', markets: [btc, { question: 'no condition id' }] },
      ],
      tags: [],
      profiles: [],
      pagination: {},
    },
  })
  t.same(
    (await source.search('crypto', 10)).map((m) => [m.slug, m.url]),
    [
      ['ethereum-flippening-2026', 'https://polymarket.com/event/crypto-2026'],
      ['will-bitcoin-reach-150k-by-december-31-2026', 'https://polymarket.com/event/crypto-2026'],
    ],
  )
})

t.test('Gamma: one market by its condition id; an unknown one is undefined', async (t) => {
  const source = polymarketPredictions(client('polymarket', upstreams.base.gamma))
  const one = await source.market('0x9c1a953b4c3ad1a1a1de24c2ac3b1d4e0c1e2b3a4d5c6b7a8f9e0d1c2b3a4f5e')
  t.match(one, {
    slug: 'fed-rate-cut-in-december-2026',
    outcomes: [
      { name: 'Yes', price: 0.62 },
      { name: 'No', price: 0.38 },
    ],
    url: 'https://polymarket.com/event/fed-decision-in-december-2026',
  })
  t.equal(upstreams.calls('/markets'), 1)
  t.equal(await source.market(`0x${'ab'.repeat(32)}`), undefined)
})

t.test('LI.FI: a quote with hex value and gas limit as integers, its fees, the transaction to sign; chains', async (t) => {
  const source = lifiBridge(client('lifi', upstreams.base.lifi))
  const request = {
    fromChainId: 42161,
    toChainId: 8453,
    fromToken: '0xaf88d065e77c8cC2239327C5EDb3A432268e5831',
    toToken: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    amount: 100_000_000n,
    userAddress: user,
    slippageBps: 50,
  } as const
  const quote = await source.quote(request)
  t.match(quote, {
    source: 'lifi',
    tool: 'across',
    fromChainId: 42161,
    toChainId: 8453,
    fromToken: { symbol: 'USDC', decimals: 6, chainId: 42161, priceUsd: 0.9999 },
    fromAmount: '100000000',
    toAmount: '99952261',
    toAmountMin: '99452500',
    estimatedDurationSeconds: 52,
    feeCosts: [
      { name: 'LIFI Fixed Fee', amountUsd: '0.2500' },
      { name: 'Relayer fee', amountUsd: '0.0477' },
    ],
    gasCosts: [{ name: 'SEND', amountUsd: '0.0056' }],
    transactionRequest: { to: '0x1231DEB6f5749EF6cE6943a275A1D3E7486F4EaE', value: '0', gasLimit: '240516', chainId: 42161 },
  })
  t.ok(valid(BridgeQuote, [quote]))

  await t.rejects(source.quote({ ...request, amount: 1n }), {
    statusCode: 422,
    message: /no bridge route: LI.FI says "No available quotes for the requested transfer"/,
  })
  await t.rejects(source.quote({ ...request, toChainId: 999999 }), { statusCode: 400, message: /LI.FI cannot quote this: toChain must be/ })

  const chains = await source.chains()
  t.same(
    chains.map((c) => c.id),
    [42161, 8453],
    'a non-EVM chain (Solana) is left out',
  )
  t.same(chains[0], {
    id: 42161,
    key: 'arb',
    name: 'Arbitrum',
    nativeToken: { address: '0x0000000000000000000000000000000000000000', symbol: 'ETH', decimals: 18 },
  })
  t.ok(valid(BridgeChain, chains))
})

t.test('the local APIs refuse what the real ones refuse, so an adapter sending a wrong request fails', async (t) => {
  const refusal = (name: string, base: string, path: string, query: Record<string, string | number>) =>
    t.rejects(
      client(name, base).getJson(path, { query }),
      { code: 'ATS_ERR_UPSTREAM_STATUS', status: 400 },
      `${name} ${path} ${JSON.stringify(query)}`,
    )
  await refusal('coingecko', upstreams.base.coingecko, '/simple/price', { ids: 'ethereum' })
  await refusal('alchemy', upstreams.base.alchemy, '/getNFTsForOwner', { withMetadata: 'true' })
  const quote = { fromChain: 42161, toChain: 8453, fromToken: user, toToken: user, fromAmount: '1000', fromAddress: user }
  await refusal('lifi', upstreams.base.lifi, '/quote', { ...quote, slippage: 50 })
  await refusal('lifi', upstreams.base.lifi, '/quote', { ...quote, fromAddress: '' })
})

t.test('a slow upstream answers after its delay, and each request is counted', async (t) => {
  upstreams.behave('/simple/price', { delayMs: 200 })
  const source = coingeckoPrices(client('coingecko', upstreams.base.coingecko))
  const started = Date.now()
  const [a, b] = await Promise.all([source.prices(), source.prices()])
  t.ok(Date.now() - started >= 190, `took ${Date.now() - started} ms`)
  t.same(a, b)
  t.equal(upstreams.calls('/simple/price'), 2)
  t.equal(upstreams.calls(), 2, 'no other calls')
  upstreams.behave('/simple/price', 'ok')
  const quick = Date.now()
  await source.prices()
  t.ok(Date.now() - quick < 190, 'back to normal')
})

t.test('an upstream 500 is a 502 that names the upstream', async (t) => {
  upstreams.behave('/simple/price', 500)
  await t.rejects(coingeckoPrices(client('coingecko', upstreams.base.coingecko)).prices(), {
    statusCode: 502,
    message: 'coingecko failed: 500 Internal Server Error',
  })
})

t.test('an upstream that never answers is a 503 at the timeout, not a hang', async (t) => {
  upstreams.behave('/trending_pools', 'hang')
  const started = Date.now()
  await t.rejects(geckoTerminalTrending(client('geckoterminal', upstreams.base.geckoterminal, 300), { network: 'arbitrum' }).trending(10), {
    statusCode: 503,
    message: 'geckoterminal did not answer within 300 ms',
  })
  const took = Date.now() - started
  t.ok(took >= 290 && took < 1000, `gave up after ${took} ms`)
})

t.test('an upstream that rate-limits (429, retry-after too long) is a 503', async (t) => {
  upstreams.behave('/public-search', 429)
  await t.rejects(polymarketPredictions(client('polymarket', upstreams.base.gamma)).search('bitcoin', 5), {
    statusCode: 503,
    message: /polymarket is rate limiting our requests/,
  })
  t.equal(upstreams.calls('/public-search'), 1, 'not retried against a 60 s retry-after')
})

t.test('an answer of the wrong shape is a 502 that says what was wrong, not a crash', async (t) => {
  upstreams.behave('/chains', { body: { chains: 'all of them' } })
  await t.rejects(lifiBridge(client('lifi', upstreams.base.lifi)).chains(), {
    statusCode: 502,
    message: 'lifi answered an unexpected shape: no chains array',
  })
  upstreams.behave('/simple/price', { body: { ethereum: { usd: '3000' } } })
  await t.rejects(coingeckoPrices(client('coingecko', upstreams.base.coingecko)).prices(), {
    statusCode: 502,
    message: /ethereum.usd is not a number/,
  })
  upstreams.behave('/getNFTsForOwner', { body: [] })
  await t.rejects(alchemyNfts(client('alchemy', upstreams.base.alchemy)).nftsOf(user, {}), {
    statusCode: 502,
    message: 'alchemy answered an unexpected shape: no ownedNfts array',
  })
})
