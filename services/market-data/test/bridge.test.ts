import type { AddressBook } from '@ats/chain'
import { BridgeQuote, type CoreAsset, type PriceEntry } from '@ats/contracts'
import t from 'tap'
import { Compile } from 'typebox/compile'
import type { Address } from 'viem'
import { modelBridge } from '../src/local/bridge.ts'
import { modelChains, nativeAddress } from '../src/local/bridgeChains.ts'
import type { BridgeRequest, PriceSource } from '../src/providers/types.ts'

/** Fixed prices, as GET /market/prices would answer them; GMX and LINK unpriced. */
const fixed: Partial<Record<CoreAsset, number>> = { ETH: 3000.1, BTC: 60_000, USDC: 1, USDT: 1, ARB: 0.5 }
const prices: PriceSource = {
  name: 'fixed',
  prices: async () =>
    Object.fromEntries(Object.entries(fixed).map(([asset, price]) => [asset, { price, change24h: 0 } satisfies PriceEntry])),
}

const zero = nativeAddress
const devnetUsdc: Address = '0x5FbDB2315678afecb367f032d93F642f64180aa3'
const devnetBook: AddressBook = {
  chainId: 31337,
  name: 'devnet',
  tokens: [{ symbol: 'USDC', name: 'USD Coin', decimals: 6, address: devnetUsdc }],
  uniswapV3: { factory: zero, quoterV2: zero, swapRouter02: zero, positionManager: zero },
  algebra: { factory: zero, quoterV2: zero, swapRouter: zero, positionManager: zero },
}

const bridge = modelBridge({ prices, book: () => devnetBook, chainId: 31337 })
const usdc = {
  arbitrum: '0xaf88d065e77c8cC2239327C5EDb3A432268e5831',
  base: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
  ethereum: '0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48',
  bsc: '0x8AC76a51cc950d9822D68b83fE1Ad97B32Cd580d',
} as const
const user: Address = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'
const request = (fields: Partial<BridgeRequest> = {}): BridgeRequest => ({
  fromChainId: 42161,
  toChainId: 8453,
  fromToken: usdc.arbitrum,
  toToken: usdc.base,
  amount: 1000n * 10n ** 6n,
  userAddress: user,
  slippageBps: 0,
  ...fields,
})
const shape = Compile(BridgeQuote)

t.test('1000 USDC from Arbitrum to Base arrives less the bridge fee (5 bps) and the relayer fee (0.50 USD)', async (t) => {
  const quote = await bridge.quote(request())
  t.ok(shape.Check(quote), 'the contract shape')
  t.equal(quote.toAmount, '999000000', '1000 - 0.50 - 0.50')
  t.same(quote.feeCosts, [
    { name: 'bridge fee', amountUsd: '0.5' },
    { name: 'relayer fee', amountUsd: '0.5' },
  ])
  t.same(quote.gasCosts, [{ name: 'gas on the source chain', amountUsd: '0.05' }], 'gas is paid besides the amount')
  t.match(quote, { source: 'model', tool: 'model', fromAmount: '1000000000', estimatedDurationSeconds: 120 })
  t.match(quote.fromToken, { chainId: 42161, symbol: 'USDC', decimals: 6, priceUsd: 1 })
  t.match(quote.toToken, { chainId: 8453, address: usdc.base, symbol: 'USDC', decimals: 6, priceUsd: 1 })
  t.notOk('transactionRequest' in quote)
})

t.test('ETH from Ethereum to Arbitrum USDC converts at the ETH price and takes 20 minutes', async (t) => {
  const quote = await bridge.quote(
    request({ fromChainId: 1, toChainId: 42161, fromToken: zero, toToken: usdc.arbitrum, amount: 10n ** 18n }),
  )
  // 3000.1 USD, less 1.50005 and 0.50
  t.equal(quote.toAmount, '2998099950')
  t.match(quote, { estimatedDurationSeconds: 1200, fromToken: { symbol: 'ETH', priceUsd: 3000.1 }, gasCosts: [{ amountUsd: '3' }] })
  t.same(
    quote.feeCosts.map((c) => c.amountUsd),
    ['1.50005', '0.5'],
  )
})

t.test('USDC to WBTC on Ethereum takes 15 minutes and values BTC at its price', async (t) => {
  const quote = await bridge.quote(
    request({ toChainId: 1, toToken: '0x2260FAC5E5542a773Aa44fBCfeDf7C193bc2C599', amount: 60_001n * 10n ** 6n }),
  )
  // 60001 USD less 30.0005 and 0.50 = 59970.4995 USD = 0.999508325 BTC, in 8 decimals rounded down
  t.match(quote, { toAmount: '99950832', estimatedDurationSeconds: 900, toToken: { symbol: 'WBTC', decimals: 8, priceUsd: 60_000 } })
})

t.test("BSC's 18-decimal USDC arrives as Arbitrum's 6-decimal USDC", async (t) => {
  const quote = await bridge.quote(
    request({ fromChainId: 56, toChainId: 42161, fromToken: usdc.bsc, toToken: usdc.arbitrum, amount: 100n * 10n ** 18n }),
  )
  t.match(quote, { toAmount: '99450000', gasCosts: [{ amountUsd: '0.1' }] })
})

t.test('toAmountMin is toAmount less slippageBps', async (t) => {
  const quote = await bridge.quote(request({ slippageBps: 100 }))
  t.equal(quote.toAmount, '999000000')
  t.equal(quote.toAmountMin, '989010000')
  t.equal((await bridge.quote(request({ slippageBps: 0 }))).toAmountMin, '999000000')
})

t.test('an amount that does not cover the fees answers 422 with the fees', async (t) => {
  await t.rejects(bridge.quote(request({ amount: 500_000n })), {
    statusCode: 422,
    message:
      'amount too small: 0.5 USD of USDC does not cover the fees of 0.50025 USD (a bridge fee of 5 bps and a relayer fee of 0.50 USD)',
  })
  t.equal((await bridge.quote(request({ amount: 600_000n }))).toAmount, '99700', 'just above the fees')
})

t.test('an unknown chain answers 400 naming it and pointing to GET /bridge/chains', async (t) => {
  await t.rejects(bridge.quote(request({ toChainId: 324 })), {
    statusCode: 400,
    message: 'toChainId 324 is not a chain the bridge knows: GET /bridge/chains lists them',
  })
  await t.rejects(bridge.quote(request({ fromChainId: 31337 })), { statusCode: 400, message: /fromChainId 31337 .*use 42161/ })
})

t.test('an unknown token answers 400 naming the token and the chain', async (t) => {
  await t.rejects(bridge.quote(request({ toToken: usdc.arbitrum })), {
    statusCode: 400,
    message: `toToken ${usdc.arbitrum} is not a token the bridge knows on Base (8453); it knows ETH, USDC, USDT, WETH, DAI`,
  })
  await t.rejects(bridge.quote(request({ toToken: 'ARB' })), {
    statusCode: 400,
    message: /^toToken ARB is not a token the bridge knows on Base \(8453\); it knows ETH, USDC/,
  })
})

t.test('tokens may be named by symbol, in any case: the same quote as by address', async (t) => {
  const arbitrum = modelBridge({ prices, book: () => devnetBook, chainId: 42161 })
  const byAddress = await arbitrum.quote(request())
  const bySymbol = await arbitrum.quote(request({ fromToken: 'usdc', toToken: 'USDC' }))
  t.same(bySymbol, byAddress)
  const devnet = await bridge.quote(request({ fromToken: devnetUsdc }))
  t.same(devnet.fromToken.address, devnetUsdc)
  t.same(
    (await bridge.quote(request({ fromToken: 'USDC' }))).fromToken.address,
    devnetUsdc,
    "on the devnet a symbol of the source chain is the devnet's token",
  )
})

t.test('a token without a USD price answers 400 naming it', async (t) => {
  await t.rejects(bridge.quote(request({ toChainId: 137, toToken: zero })), {
    statusCode: 400,
    message: 'the bridge model has no USD price for POL on Polygon (137)',
  })
  await t.rejects(
    bridge.quote(
      request({ toChainId: 42161, fromChainId: 8453, fromToken: usdc.base, toToken: '0xfc5A1A6EB076a2C7aD06eD22C90d7E710E35ad0a' }),
    ),
    {
      statusCode: 400,
      message: /no USD price for GMX/,
    },
  )
})

t.test('the same chain on both sides answers 400 pointing to /swap/quote', async (t) => {
  await t.rejects(bridge.quote(request({ toChainId: 42161 })), {
    statusCode: 400,
    message: 'fromChainId and toChainId are both 42161: use /swap/quote for a swap on one chain',
  })
})

t.test("on the devnet, the devnet's USDC bridges as Arbitrum's USDC", async (t) => {
  const quote = await bridge.quote(request({ fromToken: devnetUsdc }))
  t.match(quote, { toAmount: '999000000', fromToken: { chainId: 42161, address: devnetUsdc, symbol: 'USDC', decimals: 6 } })
  const arbitrum = modelBridge({ prices, book: () => devnetBook, chainId: 42161 })
  await t.rejects(
    arbitrum.quote(request({ fromToken: devnetUsdc })),
    { statusCode: 400, message: /is not a token the bridge knows on Arbitrum \(42161\)/ },
    'not on Arbitrum One itself',
  )
})

t.test('a huge amount keeps exact integer output', async (t) => {
  const usdcQuote = await bridge.quote(request({ amount: 10n ** 30n, slippageBps: 50 }))
  // 10^24 USD less 5 * 10^20 and 0.50, in 6 decimals
  t.equal(usdcQuote.toAmount, '999499999999999999999999500000')
  t.equal(usdcQuote.toAmountMin, '994502499999999999999999502500')
  const ethQuote = await bridge.quote(request({ fromChainId: 1, fromToken: zero, amount: 10n ** 30n }))
  // 3000.1 * 10^12 USD less 5 bps and 0.50
  t.equal(ethQuote.toAmount, '2998599949999999500000')
})

t.test('the same request has the same id, another request another', async (t) => {
  t.equal((await bridge.quote(request())).id, (await bridge.quote(request())).id)
  t.not((await bridge.quote(request())).id, (await bridge.quote(request({ amount: 999n * 10n ** 6n }))).id)
})

t.test('chains lists the seven chains with their native coins, and USDC leaves each of them', async (t) => {
  const chains = await bridge.chains()
  t.same(
    chains.map((c) => [c.id, c.key]),
    [
      [42161, 'arb'],
      [1, 'eth'],
      [10, 'opt'],
      [8453, 'bas'],
      [137, 'pol'],
      [56, 'bsc'],
      [43114, 'ava'],
    ],
  )
  t.ok(chains.every((c) => c.nativeToken.address === zero))
  t.same(chains[0], { id: 42161, key: 'arb', name: 'Arbitrum', nativeToken: { address: zero, symbol: 'ETH', decimals: 18 } })
  for (const chain of modelChains.filter((c) => c.id !== 42161)) {
    const from = chain.tokens.find((token) => token.symbol === 'USDC')!
    const quote = await bridge.quote(
      request({
        fromChainId: chain.id,
        toChainId: 42161,
        fromToken: from.address,
        toToken: usdc.arbitrum,
        amount: 10n ** BigInt(from.decimals + 3),
      }),
    )
    t.equal(quote.toAmount, '999000000', `from ${chain.name}, gas ${quote.gasCosts[0]!.amountUsd} USD`)
  }
})
