import { parseAbi, type Address } from 'viem'

/**
 * The contract interfaces the services call, as viem ABIs. They are the protocols'
 * own signatures: the same code reads Arbitrum One and the devnet.
 */

/** USDC's EIP-3009 surface (Circle FiatToken v2), what x402 payments settle on. */
export const eip3009Abi = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
  'function decimals() view returns (uint8)',
  'function balanceOf(address account) view returns (uint256)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function receiveWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  // FiatToken's cancelAuthorization: the nonce is used up without a transfer
  'event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
])

/** EIP-712 types for viem's signTypedData, primaryType 'TransferWithAuthorization'. */
export const transferWithAuthorizationTypes = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const

/** Same fields under primaryType 'ReceiveWithAuthorization' (only the payee may submit it). */
export const receiveWithAuthorizationTypes = {
  ReceiveWithAuthorization: transferWithAuthorizationTypes.TransferWithAuthorization,
} as const

/** The EIP-712 domain of USDC (FiatToken v2): name "USD Coin", version "2". */
export function usdcDomain(chainId: number, verifyingContract: Address) {
  return { name: 'USD Coin', version: '2', chainId, verifyingContract } as const
}

/** Aave V3 Pool: the account summary (base currency USD with 8 decimals, bps, wad). */
export const aavePoolAbi = parseAbi([
  'function getUserAccountData(address user) view returns (uint256 totalCollateralBase, uint256 totalDebtBase, uint256 availableBorrowsBase, uint256 currentLiquidationThreshold, uint256 ltv, uint256 healthFactor)',
])

/** gmx-synthetics Position.Props (contracts/position/Position.sol). */
export const gmxPositionStructs = [
  'struct Addresses { address account; address market; address collateralToken; }',
  'struct Numbers { uint256 sizeInUsd; uint256 sizeInTokens; uint256 collateralAmount; int256 pendingImpactAmount; uint256 borrowingFactor; uint256 fundingFeeAmountPerSize; uint256 longTokenClaimableFundingAmountPerSize; uint256 shortTokenClaimableFundingAmountPerSize; uint256 increasedAtTime; uint256 decreasedAtTime; }',
  'struct Flags { bool isLong; }',
  'struct Props { Addresses addresses; Numbers numbers; Flags flags; }',
] as const

/** GMX V2 Reader: an account's positions, keys [start, end). */
export const gmxReaderAbi = parseAbi([
  ...gmxPositionStructs,
  'function getAccountPositions(address dataStore, address account, uint256 start, uint256 end) view returns (Props[])',
])

/** Uniswap V3 QuoterV2 (not a view: call it with simulateContract). */
export const uniswapQuoterV2Abi = parseAbi([
  'struct QuoteExactInputSingleParams { address tokenIn; address tokenOut; uint256 amountIn; uint24 fee; uint160 sqrtPriceLimitX96; }',
  'function quoteExactInputSingle(QuoteExactInputSingleParams params) returns (uint256 amountOut, uint160 sqrtPriceX96After, uint32 initializedTicksCrossed, uint256 gasEstimate)',
])

/** Uniswap SwapRouter02. */
export const uniswapSwapRouter02Abi = parseAbi([
  'struct ExactInputSingleParams { address tokenIn; address tokenOut; uint24 fee; address recipient; uint256 amountIn; uint256 amountOutMinimum; uint160 sqrtPriceLimitX96; }',
  'function exactInputSingle(ExactInputSingleParams params) payable returns (uint256 amountOut)',
])

/** Algebra Integral QuoterV2 (Camelot); deployer = zero address for ordinary pools. */
export const algebraQuoterV2Abi = parseAbi([
  'struct QuoteExactInputSingleParams { address tokenIn; address tokenOut; address deployer; uint256 amountIn; uint160 limitSqrtPrice; }',
  'function quoteExactInputSingle(QuoteExactInputSingleParams params) returns (uint256 amountOut, uint256 amountIn, uint160 sqrtPriceX96After, uint32 initializedTicksCrossed, uint256 gasEstimate, uint16 fee)',
])

/** Algebra Integral SwapRouter (Camelot). */
export const algebraSwapRouterAbi = parseAbi([
  'struct ExactInputSingleParams { address tokenIn; address tokenOut; address deployer; address recipient; uint256 deadline; uint256 amountIn; uint256 amountOutMinimum; uint160 limitSqrtPrice; }',
  'function exactInputSingle(ExactInputSingleParams params) payable returns (uint256 amountOut)',
])

export { erc20Abi, erc721Abi } from 'viem'

/** Uniswap V3 factory: the pool of a pair and fee tier (zero address when none). */
export const uniswapFactoryAbi = parseAbi(['function getPool(address tokenA, address tokenB, uint24 fee) view returns (address pool)'])

/** Uniswap V3 pool: the current sqrt price (mid price), its tokens and fee tier. */
export const uniswapPoolAbi = parseAbi([
  'function token0() view returns (address)',
  'function token1() view returns (address)',
  'function fee() view returns (uint24)',
  'function slot0() view returns (uint160 sqrtPriceX96, int24 tick, uint16 observationIndex, uint16 observationCardinality, uint16 observationCardinalityNext, uint8 feeProtocol, bool unlocked)',
])

/** Uniswap V3 QuoterV2 over a path: tokenIn ‖ fee (uint24) ‖ token ‖ fee ‖ tokenOut. */
export const uniswapQuoterV2PathAbi = parseAbi([
  'function quoteExactInput(bytes path, uint256 amountIn) returns (uint256 amountOut, uint160[] sqrtPriceX96AfterList, uint32[] initializedTicksCrossedList, uint256 gasEstimate)',
])

/** Uniswap SwapRouter02: multi-hop exact input, and the multicall that carries a deadline. */
export const uniswapSwapRouter02PathAbi = parseAbi([
  'struct ExactInputParams { bytes path; address recipient; uint256 amountIn; uint256 amountOutMinimum; }',
  'function exactInput(ExactInputParams params) payable returns (uint256 amountOut)',
  'function multicall(uint256 deadline, bytes[] data) payable returns (bytes[] results)',
])

/** Algebra Integral factory (Camelot): the one pool of a pair (zero address when none). */
export const algebraFactoryAbi = parseAbi(['function poolByPair(address tokenA, address tokenB) view returns (address pool)'])

/** Algebra Integral pool: its tokens, the current sqrt price (mid price) and the last fee. */
export const algebraPoolAbi = parseAbi([
  'function token0() view returns (address)',
  'function token1() view returns (address)',
  'function globalState() view returns (uint160 price, int24 tick, uint16 lastFee, uint8 pluginConfig, uint16 communityFee, bool unlocked)',
])

/** Algebra Integral QuoterV2 over a path: tokenIn ‖ deployer ‖ token ‖ deployer ‖ tokenOut (deployer zero for ordinary pools). */
export const algebraQuoterV2PathAbi = parseAbi([
  'function quoteExactInput(bytes path, uint256 amountInRequired) returns (uint256[] amountOutList, uint256[] amountInList, uint160[] sqrtPriceX96AfterList, uint32[] initializedTicksCrossedList, uint256 gasEstimate, uint16[] feeList)',
])

/** Algebra Integral SwapRouter (Camelot): multi-hop exact input with a deadline. */
export const algebraSwapRouterPathAbi = parseAbi([
  'struct ExactInputParams { bytes path; address recipient; uint256 deadline; uint256 amountIn; uint256 amountOutMinimum; }',
  'function exactInput(ExactInputParams params) payable returns (uint256 amountOut)',
])

/** GMX V2 Reader: a market's tokens (Market.Props). */
export const gmxReaderMarketAbi = parseAbi([
  'struct MarketProps { address marketToken; address indexToken; address longToken; address shortToken; }',
  'function getMarket(address dataStore, address key) view returns (MarketProps)',
])

/**
 * Multicall3 (github.com/mds1/multicall), at the address it has on Arbitrum One and nearly every
 * chain; the devnet puts the same code there. Many read calls in one `eth_call`: the gateway reads
 * the authorization state of every payment of a tick through it.
 */
export const MULTICALL3_ADDRESS: Address = '0xcA11bde05977b3631167028862bE2a173976CA11'
export { multicall3Abi } from 'viem'
