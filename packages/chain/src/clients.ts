import { createNonceManager, createPublicClient, createWalletClient, defineChain, http, type Chain, type Hex, type PublicClient, type WalletClient } from 'viem'
import { jsonRpc } from 'viem/nonce'
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { arbitrum } from 'viem/chains'

/** A typed 503: services answer it as `{error: "server wallet not configured"}`, not as a 500. */
export class ServerWalletNotConfigured extends Error {
  override name = 'ServerWalletNotConfigured'
  readonly code = 'ATS_ERR_SERVER_WALLET_NOT_CONFIGURED'
  readonly statusCode = 503
  constructor() {
    super('server wallet not configured')
  }
}

export interface ChainSettings {
  rpcUrl: string
  chainId: number
  /** SERVER_WALLET_PRIVATE_KEY; without it, write operations are refused */
  privateKey?: Hex
}

export interface ChainClients {
  chain: Chain
  publicClient: PublicClient
  /** the server wallet, or throws ServerWalletNotConfigured */
  wallet(): { client: WalletClient; account: PrivateKeyAccount }
}

function chainFor({ chainId, rpcUrl }: ChainSettings): Chain {
  if (chainId === arbitrum.id) return { ...arbitrum, rpcUrls: { default: { http: [rpcUrl] } } }
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
  const transport = http(settings.rpcUrl, { batch: true, retryCount: 2 })
  const publicClient = createPublicClient({ chain, transport }) as PublicClient
  // A nonce manager of these clients' own (viem's default one is shared by the whole process and
  // never goes below a nonce it handed out): transactions are sent without waiting for the
  // previous one to be mined; viem resets it when a send fails.
  const account = settings.privateKey
    ? privateKeyToAccount(settings.privateKey, { nonceManager: createNonceManager({ source: jsonRpc() }) })
    : undefined
  const walletClient = account ? createWalletClient({ chain, transport, account }) : undefined
  return {
    chain,
    publicClient,
    wallet: () => {
      if (!account || !walletClient) throw new ServerWalletNotConfigured()
      return { client: walletClient, account }
    },
  }
}
