import { createPublicClient, defineChain, http, type Chain, type Hex, type PublicClient, type Transport } from 'viem'
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { ServerWalletNotConfigured } from './errors.ts'
import { rpcFetch } from './rpcFetch.ts'

export interface ChainSettings {
  rpcUrl: string
  chainId: number
  /** SERVER_WALLET_PRIVATE_KEY; without it, write operations are refused */
  privateKey?: Hex
  /** wraps the HTTP transport (the service kit's tracing adds a span per RPC call) */
  wrapTransport?: (transport: Transport) => Transport
}

export interface ChainClients {
  chain: Chain
  publicClient: PublicClient
  /**
   * the server wallet's account (its address, and signing), or throws ServerWalletNotConfigured.
   * Transactions are sent through the kit's `ctx.chain.sender()`, which coordinates the wallet's
   * nonces across the fleet.
   */
  wallet(): { account: PrivateKeyAccount }
}

/**
 * Arbitrum One as viem defines it (`viem/chains`), written here: importing `viem/chains` loads the
 * definitions of every chain viem knows (742 modules), which every process and test paid at start.
 */
export const arbitrumChain: Chain = defineChain({
  id: 42161,
  name: 'Arbitrum One',
  nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
  blockTime: 250,
  rpcUrls: { default: { http: ['https://arb1.arbitrum.io/rpc'] } },
  blockExplorers: { default: { name: 'Arbiscan', url: 'https://arbiscan.io', apiUrl: 'https://api.arbiscan.io/api' } },
  contracts: { multicall3: { address: '0xca11bde05977b3631167028862be2a173976ca11', blockCreated: 7654707 } },
})

/** A local anvil (chain id 31337), as `viem/chains` defines it. */
export const anvilChain: Chain = defineChain({
  id: 31337,
  name: 'Anvil',
  nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
  rpcUrls: { default: { http: ['http://127.0.0.1:8545'], webSocket: ['ws://127.0.0.1:8545'] } },
})

function chainFor({ chainId, rpcUrl }: ChainSettings): Chain {
  if (chainId === arbitrumChain.id) return { ...arbitrumChain, rpcUrls: { default: { http: [rpcUrl] } } }
  return defineChain({
    id: chainId,
    name: chainId === 31337 ? 'devnet' : `chain ${chainId}`,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  })
}

/** The one factory for viem clients: every service talks to the chain through it. */
export function createChainClients(settings: ChainSettings): ChainClients {
  const chain = chainFor(settings)
  const plain = http(settings.rpcUrl, { batch: true, retryCount: 2, fetchFn: rpcFetch })
  const transport = settings.wrapTransport ? settings.wrapTransport(plain) : plain
  const publicClient = createPublicClient({ chain, transport }) as PublicClient
  const account = settings.privateKey ? privateKeyToAccount(settings.privateKey) : undefined
  return {
    chain,
    publicClient,
    wallet: () => {
      if (!account) throw new ServerWalletNotConfigured()
      return { account }
    },
  }
}
