// The trading token list as services keep it: lookup by symbol, alias or address, one load per ttl.
import t from 'tap'
import { findToken, tradingTokens, type ListedToken, type TokenList } from '../src/index.ts'

const weth: ListedToken = { symbol: 'WETH', decimals: 18, address: '0x82aF49447D8a07e3bd95BD0d56f35241523fBab1' }
const usdc: ListedToken = { symbol: 'USDC', decimals: 6, address: '0xaf88d065e77c8cC2239327C5EDb3A432268e5831' }

t.test('a token is found by symbol in any case, by the name people use, or by address', async (t) => {
  t.equal(findToken([weth, usdc], 'usdc'), usdc)
  t.equal(findToken([weth, usdc], 'ETH'), weth)
  t.equal(findToken([weth, usdc], usdc.address.toLowerCase()), usdc)
  t.equal(findToken([weth, usdc], 'DOGE'), undefined)
})

t.test('the list is loaded once per ttl, shared while loading, and a failed load is not kept', async (t) => {
  let clock = 0
  let loads = 0
  let fail = true
  const tokens = tradingTokens(
    async (): Promise<TokenList> => {
      loads++
      if (fail) throw new Error('no responders')
      return { chainId: 42161, tokens: [weth, usdc] }
    },
    { ttlMs: 1000, now: () => clock },
  )
  await t.rejects(tokens.list(), /no responders/)
  fail = false
  const [a, b] = await Promise.all([tokens.find('eth'), tokens.list()])
  t.equal(a, weth)
  t.equal(b.length, 2)
  t.equal(loads, 2, 'the failure was not kept; the two callers shared one load')
  clock = 999
  await tokens.list()
  t.equal(loads, 2)
  clock = 1000
  await tokens.list()
  t.equal(loads, 3, 'asked again once the ttl passed')
})
