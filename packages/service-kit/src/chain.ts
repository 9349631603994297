// The chain as a service sees it (`ctx.chain`): its settings, viem clients traced per call, and the server wallet's sender.
import {
  ARBITRUM_ONE_CHAIN_ID,
  DEVNET_CHAIN_ID,
  addressBookFor,
  createChainClients,
  createTokenRegistry,
  createWalletLock,
  createWalletSender,
  walletLockName,
  type AddressBook,
  type ChainClients,
  type TokenRegistry,
  type WalletLock,
  type WalletSender,
} from '@ats/chain'
import { bytes32Pattern } from '@ats/contracts'
import { Type, type Static, type TObject } from 'typebox'
import type { Hex, Transport } from 'viem'
import { StartupError, httpUrlSetting } from './config.ts'
import type { Logger } from './logger.ts'
import { SpanKind, inSpan, tracingEnabled } from './tracing.ts'

/**
 * The chain as a service sees it (`ctx.chain`): viem clients, the address book and token
 * registry of the configured chain, and the server wallet. A service declares `chain: 'read'`
 * or, to send transactions, `chain: 'write'`; without SERVER_WALLET_PRIVATE_KEY `wallet()` and
 * `sender()` throw a 503 "server wallet not configured" the error handler shows as `{error}`.
 */
export const chainSettings = {
  RPC_URL: httpUrlSetting({ default: 'http://127.0.0.1:8545', secret: true, description: 'JSON-RPC endpoint of the chain' }),
  // any other id started, then failed every request that needed the address book
  CHAIN_ID: Type.Refine(
    Type.Integer({ default: ARBITRUM_ONE_CHAIN_ID, description: 'chain id: 42161 (Arbitrum One) or 31337 (the devnet)' }),
    (id) => id === ARBITRUM_ONE_CHAIN_ID || id === DEVNET_CHAIN_ID,
    () => `must be ${ARBITRUM_ONE_CHAIN_ID} (Arbitrum One) or ${DEVNET_CHAIN_ID} (the devnet)`,
  ),
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
  /**
   * sends from the server wallet, its nonces coordinated across the fleet by a Postgres advisory
   * lock on DATABASE_URL (every sender must use the same database); or throws ServerWalletNotConfigured
   */
  sender(): WalletSender
  /** ends what `sender()` opened; the kit calls it on shutdown */
  close(): Promise<void>
}

export type ChainConfig = Static<TObject<typeof chainSettings & typeof serverWalletSettings>> & {
  /** where the server wallet's lock is taken; without it, only this process is coordinated */
  DATABASE_URL?: string | undefined
}

/** The address book read at start, so a missing or wrong ADDRESS_BOOK stops the process instead of failing requests. */
export function checkAddressBook(config: ChainConfig): void {
  try {
    addressBookFor({ chainId: config.CHAIN_ID, addressBookPath: config.ADDRESS_BOOK })
  } catch (error) {
    throw new StartupError(`invalid setting ADDRESS_BOOK: ${(error as Error).message}`)
  }
}

/**
 * A client span per JSON-RPC call (`rpc eth_call`), over viem's transport: calls viem batches
 * into one HTTP request keep a span each. The RPC provider gets no traceparent.
 */
function tracedTransport(transport: Transport): Transport {
  return (params) => {
    const inner = transport(params)
    const request: typeof inner.request = (args, options) =>
      inSpan(
        `rpc ${args.method}`,
        {
          kind: SpanKind.CLIENT,
          attributes: { 'rpc.system': 'jsonrpc', 'rpc.method': args.method, 'ats.chain_id': params.chain?.id ?? 0 },
        },
        () => inner.request(args, options),
      )
    return { ...inner, request }
  }
}

export function createChainContext(config: ChainConfig, log?: Logger): ChainContext {
  const clients = createChainClients({
    rpcUrl: config.RPC_URL,
    chainId: config.CHAIN_ID,
    ...(config.SERVER_WALLET_PRIVATE_KEY ? { privateKey: config.SERVER_WALLET_PRIVATE_KEY as Hex } : {}),
    ...(tracingEnabled() ? { wrapTransport: tracedTransport } : {}),
  })
  let book: AddressBook | undefined
  let tokens: TokenRegistry | undefined
  let sender: WalletSender | undefined
  let lock: WalletLock | undefined
  const addressBook = () => (book ??= addressBookFor({ chainId: config.CHAIN_ID, addressBookPath: config.ADDRESS_BOOK }))
  return {
    ...clients,
    chainId: config.CHAIN_ID,
    hasWallet: Boolean(config.SERVER_WALLET_PRIVATE_KEY),
    addressBook,
    tokens: () => (tokens ??= createTokenRegistry(addressBook().tokens)),
    sender: () => {
      if (sender) return sender
      const { account } = clients.wallet()
      if (!config.DATABASE_URL) {
        log?.warn(
          'no DATABASE_URL: the nonces of the server wallet are coordinated in this process only; another process sending from it would collide',
        )
      }
      lock = createWalletLock(walletLockName(config.CHAIN_ID, account.address), config.DATABASE_URL, log)
      sender = createWalletSender({ publicClient: clients.publicClient, account, chainId: config.CHAIN_ID, lock })
      return sender
    },
    close: async () => lock?.close(),
  }
}
