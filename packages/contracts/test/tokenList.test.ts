// The trading token list as services read it: lookup by symbol, alias or address.
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

t.test('lookups read the list the loader answers, and reject when it does', async (t) => {
  let fail = true
  const tokens = tradingTokens(async (): Promise<TokenList> => {
    if (fail) throw new Error('no responders')
    return { chainId: 42161, tokens: [weth, usdc] }
  })
  await t.rejects(tokens.find('eth'), /no responders/)
  fail = false
  t.equal(await tokens.find('eth'), weth)
  t.equal((await tokens.list()).length, 2)
})
