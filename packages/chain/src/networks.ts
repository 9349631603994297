import type { Address, Hex } from 'viem'
import { arbitrumOneTokens, type Token } from './tokens.ts'

/** Where the protocols the service uses live on one network. */
export interface AddressBook {
  chainId: number
  name: string
  tokens: readonly Token[]
  uniswapV3: {
    factory: Address
    quoterV2: Address
    swapRouter02: Address
    positionManager: Address
    /** pools known to exist, by name (the devnet: its seeded pools, e.g. WETH_USDC_500) */
    pools?: Record<string, Address>
  }
  /** Camelot's current AMM runs Algebra Integral */
  algebra: {
    factory: Address
    quoterV2: Address
    swapRouter: Address
    positionManager: Address
    /** the pool deployer (pool addresses are CREATE2 from it) */
    poolDeployer?: Address
    /** pools known to exist, by name (the devnet: its seeded pools, e.g. WETH_USDC) */
    pools?: Record<string, Address>
  }
  aaveV3?: { pool: Address }
  gmxV2?: { dataStore: Address; reader: Address }
  /** ERC-721 collections the NFT routes know; those in `spam` are hidden unless asked for */
  nfts?: { collections: Address[]; spam: Address[] }
  /** Only on a local devnet (chain 31337): where it answers and its funded test accounts. */
  devnet?: {
    rpcUrl: string
    /** anvil's public default test accounts ("test test … junk"); never use these keys elsewhere */
    accounts: { address: Address; privateKey: Hex }[]
  }
}

export const arbitrumOne: AddressBook = {
  chainId: 42161,
  name: 'arbitrum-one',
  tokens: arbitrumOneTokens,
  uniswapV3: {
    factory: '0x1F98431c8aD98523631AE4a59f267346ea31F984',
    quoterV2: '0x61fFE014bA17989E743c5F6cB21bF9697530B21e',
    swapRouter02: '0x68b3465833fb72A70ecDF485E0e4C7bD8665Fc45',
    positionManager: '0xC36442b4a4522E871399CD717aBDD847Ab11FE88',
  },
  algebra: {
    factory: '0xBefC4b405041c5833f53412fF997ed2f697a2f37',
    quoterV2: '0xFe24b2cDfF01B644995bc248bA8497467d688F7B',
    swapRouter: '0x4ee15342d6Deb297c3A2aA7CFFd451f788675F53',
    positionManager: '0xA602E7195fcC9364210181DffA33482B5adCE9d8',
  },
  aaveV3: { pool: '0x794a61358D6845594F94dc1DB02A252b5b4814aD' },
  gmxV2: {
    dataStore: '0xFD70de6b91282D8017aA4E741e9Ae325CAb992d8',
    reader: '0x470fbC46bcC0f16532691Df360A07d8Bf5ee0789',
  },
}
