import { addressBookFor, createChainClients, createTokenRegistry, type AddressBook, type ChainClients, type TokenRegistry } from '@ats/chain'
import { bytes32Pattern } from '@ats/contracts'
import { Type } from 'typebox'
import type { Hex } from 'viem'

/**
 * The chain as a service sees it (`ctx.chain`): viem clients, the address book and token
 * registry of the configured chain, and the server wallet. A service declares `chain: 'read'`
 * or, to send transactions, `chain: 'write'`; without SERVER_WALLET_PRIVATE_KEY `wallet()`
 * throws a 503 "server wallet not configured" the error handler shows as `{error}`.
 */
export const chainSettings = {
  RPC_URL: Type.String({ default: 'http://127.0.0.1:8545', secret: true, description: 'JSON-RPC endpoint of the chain' }),
  CHAIN_ID: Type.Integer({ default: 42161, description: 'chain id: 42161 (Arbitrum One) or 31337 (the devnet)' }),
  ADDRESS_BOOK: Type.Optional(Type.String({ description: "the devnet's address book file (chain 31337)" })),
}

export const serverWalletSettings = {
  SERVER_WALLET_PRIVATE_KEY: Type.Optional(
    Type.String({ pattern: bytes32Pattern, secret: true, description: 'the server wallet: it sends transactions and pays their gas' }),
  ),
}

export interface ChainContext extends ChainClients {
  chainId: number
  /** whether SERVER_WALLET_PRIVATE_KEY is set: `wallet()` works */
  hasWallet: boolean
  /** the chain's address book, read once on first use */
  addressBook(): AddressBook
  tokens(): TokenRegistry
}

export interface ChainConfig {
  RPC_URL: string
  CHAIN_ID: number
  ADDRESS_BOOK?: string | undefined
  SERVER_WALLET_PRIVATE_KEY?: string | undefined
}

export function createChainContext(config: ChainConfig): ChainContext {
  const clients = createChainClients({
    rpcUrl: config.RPC_URL,
    chainId: config.CHAIN_ID,
    ...(config.SERVER_WALLET_PRIVATE_KEY ? { privateKey: config.SERVER_WALLET_PRIVATE_KEY as Hex } : {}),
  })
  let book: AddressBook | undefined
  let tokens: TokenRegistry | undefined
  const addressBook = () =>
    (book ??= addressBookFor({ chainId: config.CHAIN_ID, ...(config.ADDRESS_BOOK ? { addressBookPath: config.ADDRESS_BOOK } : {}) }))
  return {
    ...clients,
    chainId: config.CHAIN_ID,
    hasWallet: Boolean(config.SERVER_WALLET_PRIVATE_KEY),
    addressBook,
    tokens: () => (tokens ??= createTokenRegistry(addressBook().tokens)),
  }
}
