export { startAnvil, anvilBinary, ANVIL_CHAIN_ID, type Anvil, type StartAnvilOptions } from './anvil.ts'
export {
  deployDevnet,
  fundDevnet,
  startDevnet,
  type AddressBook,
  type DevnetAddressBook,
  type Devnet,
  type StartDevnetOptions,
} from './deploy.ts'
export { writeAddressBook } from './addressBook.ts'
export { devAccounts, fundAccounts, sendBatch, FUNDING, DEFAULT_FUNDING, DEV_MNEMONIC, type DevAccount, type BatchTx } from './funding.ts'
export { deployTokens, tokenBySymbol } from './tokens.ts'
export { localArtifact, type Artifact } from './artifacts.ts'
export { DEPLOYER_PRIVATE_KEY } from './session.ts'
export { WETH_PRICE_USDC } from './seed.ts'
export type { UniswapV3Addresses } from './uniswap.ts'
export type { AlgebraAddresses } from './algebra.ts'
export { sqrtPriceX96, sortTokens } from './price.ts'
export {
  eip3009Abi,
  transferWithAuthorizationTypes,
  receiveWithAuthorizationTypes,
  usdcDomain,
  aavePoolAbi,
  gmxReaderAbi,
} from '@ats/chain'
export { collectionAbi, listTokensByLogs } from './collection.ts'
export { SEEDED_LENDING, SEEDED_PERP } from './positions.ts'
export { startTestDevnet } from './testing.ts'
