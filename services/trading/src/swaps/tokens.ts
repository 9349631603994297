import { erc20Abi, type Token, type TokenRegistry } from '@ats/chain'
import { BadRequest, cachedLoader } from '@ats/service-kit'
import { getAddress, isAddress, type Address, type PublicClient } from 'viem'
import { isRevert, rethrowAsChainError } from '../chainTx.ts'

/** Tokens by symbol or address: the network's registry first, then any ERC-20 address the chain answers for. */
export function tokenResolver(client: PublicClient, registry: () => TokenRegistry) {
  const onChain = cachedLoader<Address, Token | null>({
    max: 1_000,
    ttlMs: 3600_000,
    ttlOf: (token) => (token ? 3600_000 : 30_000),
    load: async (address) => {
      try {
        const [symbol, decimals] = await Promise.all([
          client.readContract({ address, abi: erc20Abi, functionName: 'symbol' }),
          client.readContract({ address, abi: erc20Abi, functionName: 'decimals' }),
        ])
        return { symbol, name: symbol, decimals, address }
      } catch (error) {
        if (isRevert(error)) return null // not an ERC-20
        return rethrowAsChainError(error)
      }
    },
  })
  const known = () =>
    registry()
      .all.map((t) => t.symbol)
      .join(', ')
  return {
    async resolve(field: string, ref: string): Promise<Token> {
      const found = registry().find(ref)
      if (found) return found
      if (isAddress(ref, { strict: false })) {
        const token = await onChain.get(getAddress(ref))
        if (token) return token
        throw new BadRequest(`${field}: ${ref} is not an ERC-20 token on this chain`)
      }
      throw new BadRequest(`${field}: unknown token "${ref}"; use a token address or one of ${known()}`)
    },
    bySymbol: (symbol: string) => registry().find(symbol),
    /** the address-book entry of this token, by its address (undefined: a token outside the address book, whatever its symbol() says) */
    listed: (token: Pick<Token, 'address'>) => {
      const found = registry().find(token.address)
      return found && found.address === getAddress(token.address) ? found : undefined
    },
    /** WETH: what paths route through when there is no direct pool */
    weth(): Token {
      const weth = registry().find('WETH')
      if (!weth) throw new Error('the token registry has no WETH')
      return weth
    },
  }
}

export type TokenResolver = ReturnType<typeof tokenResolver>
