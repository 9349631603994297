import { getAddress, type Address } from 'viem'

export interface Token {
  symbol: string
  name: string
  decimals: number
  address: Address
}

/** The tokens the service knows on Arbitrum One (chain 42161). */
export const arbitrumOneTokens: readonly Token[] = [
  { symbol: 'WETH', name: 'Wrapped Ether', decimals: 18, address: '0x82aF49447D8a07e3bd95BD0d56f35241523fBab1' },
  { symbol: 'USDC', name: 'USD Coin', decimals: 6, address: '0xaf88d065e77c8cC2239327C5EDb3A432268e5831' },
  { symbol: 'USDC.e', name: 'Bridged USDC', decimals: 6, address: '0xFF970A61A04b1cA14834A43f5dE4533eBDDB5CC8' },
  { symbol: 'USDT', name: 'Tether USD', decimals: 6, address: '0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9' },
  { symbol: 'ARB', name: 'Arbitrum', decimals: 18, address: '0x912CE59144191C1204E64559FE8253a0e49E6548' },
  { symbol: 'WBTC', name: 'Wrapped BTC', decimals: 8, address: '0x2f2a2543B76A4166549F7aaB2e75Bef0aefC5B0f' },
  { symbol: 'GMX', name: 'GMX', decimals: 18, address: '0xfc5A1A6EB076a2C7aD06eD22C90d7E710E35ad0a' },
  { symbol: 'LINK', name: 'ChainLink Token', decimals: 18, address: '0xf97f4df75117a78c1A5a0DBb814Af92458539FB4' },
  { symbol: 'DAI', name: 'Dai Stablecoin', decimals: 18, address: '0xDA10009cBd5D07dd0CeCc66161FC93D7c9000da1' },
]

export interface TokenRegistry {
  all: readonly Token[]
  /** by symbol or address, case-insensitive; undefined when unknown */
  find(symbolOrAddress: string): Token | undefined
}

/** A registry over one network's tokens: symbols and addresses looked up case-insensitively. */
export function createTokenRegistry(tokens: readonly Token[]): TokenRegistry {
  const index = new Map<string, Token>()
  for (const token of tokens) {
    const normalised = { ...token, address: getAddress(token.address) }
    for (const key of [token.symbol.toLowerCase(), normalised.address.toLowerCase()]) {
      if (index.has(key)) throw new Error(`token registry: ${key} appears twice`)
      index.set(key, normalised)
    }
  }
  const all = [...new Set(index.values())]
  return {
    all,
    find: (symbolOrAddress) => index.get(symbolOrAddress.trim().toLowerCase()),
  }
}
