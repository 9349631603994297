// Trading's HTTP routes (/swap, /launchpad, /portfolio/positions) and the shapes only they use: positions, launches.
import { Type, type Static } from 'typebox'
import { ErrorBody, upstreamRouteErrors } from '../common/errors.ts'
import { Address, Bytes32, EpochMs, IntegerString, StrictObject } from '../common/primitives.ts'
import { IdParams, route } from '../common/route.ts'
import { AwaitingApproval } from './approvals.ts'
import { Execution, PrepareBody, PreparedSwap, Quote, QuoteQuery, SwapBody, SwapResult } from './swaps.ts'

export const PositionsQuery = Type.Object({
  address: Type.Optional(Address({ description: 'whose positions; the server wallet by default' })),
})

export const LendingPosition = Type.Object(
  {
    totalCollateralBase: IntegerString({ description: 'USD with 8 decimals (Aave base currency)' }),
    totalDebtBase: IntegerString({ description: 'USD with 8 decimals' }),
    availableBorrowsBase: IntegerString({ description: 'USD with 8 decimals' }),
    healthFactor: IntegerString({ description: 'wad (18 decimals); 1e18 = 1.0, liquidation below; uint256 max when there is no debt' }),
    ltv: IntegerString({ description: 'basis points (8000 = 80%)' }),
  },
  { description: 'Aave V3 Pool getUserAccountData' },
)

export const PerpPosition = Type.Object({
  market: Address({ description: 'the GMX V2 market (GM token) address' }),
  side: Type.Union([Type.Literal('long'), Type.Literal('short')]),
  size: IntegerString({ description: 'position size in USD with 30 decimals (GMX sizeInUsd)' }),
  collateral: IntegerString({ description: 'collateral in base units of collateralToken' }),
  collateralToken: Address(),
  entryPrice: IntegerString({ description: 'USD with 30 decimals per whole index token (sizeInUsd ÷ sizeInTokens)' }),
  pnl: Type.String({
    pattern: '^-?[0-9]{1,78}$',
    description:
      'unrealised PnL in USD with 30 decimals at the DEX mid price (a leading "-" for a loss), fees not counted; "0" when no price is known',
  }),
})

export const Positions = Type.Object({
  address: Address(),
  aave: LendingPosition,
  gmx: Type.Array(PerpPosition),
})
export type Positions = Static<typeof Positions>

export const LaunchBody = StrictObject({
  name: Type.String({ minLength: 1, maxLength: 64, description: 'token name' }),
  symbol: Type.String({ pattern: '^[A-Za-z0-9]{1,11}$', description: '1 to 11 letters or digits' }),
  supply: Type.String({
    minLength: 1,
    maxLength: 60,
    description: 'total supply in whole tokens, a positive integer string; all of it goes to the server wallet',
  }),
  decimals: Type.Integer({ minimum: 0, maximum: 18, default: 18 }),
})
export type LaunchBody = Static<typeof LaunchBody>

export const LaunchedToken = Type.Object({
  address: Address(),
  name: Type.String(),
  symbol: Type.String(),
  decimals: Type.Integer(),
  supply: IntegerString({ description: 'total supply in base units (whole tokens × 10^decimals)' }),
  hash: Bytes32({ description: 'the deployment transaction' }),
  holder: Address({ description: 'who received the supply: the server wallet' }),
  chainId: Type.Integer(),
  blockNumber: IntegerString(),
  createdAt: EpochMs(),
  idempotencyKey: Type.Optional(
    Type.String({
      description:
        'POST only: the Idempotency-Key this launch ran under (sent, or generated when none was; also the idempotency-key header); a repeat with it launches nothing more',
    }),
  ),
})
export type LaunchedToken = Static<typeof LaunchedToken>

const LimitQuery = Type.Object({ limit: Type.Integer({ minimum: 1, maximum: 100, default: 50 }) })

export const writeErrors = { ...upstreamRouteErrors, 409: ErrorBody, 422: ErrorBody }

export const tradingRoutes = {
  quote: route({
    method: 'GET',
    url: '/swap/quote',
    summary:
      'Quote a swap on Uniswap V3 or Camelot (routed through WETH when there is no direct pool); 422 when no pool has liquidity, or when the pools cannot absorb amountIn (the error names the largest amount that fills)',
    schema: { querystring: QuoteQuery, response: { 200: Quote, ...upstreamRouteErrors, 422: ErrorBody } },
  }),
  execute: route({
    method: 'POST',
    url: '/swap/execute',
    summary:
      "Swap from the server wallet (or, with from, from your own wallet under the grant it made: POST /grants/prepare) and wait for the receipt. Retries are safe with an Idempotency-Key: send one, or repeat with the one the answer carries (header idempotency-key, generated when none was sent; also on a 504). 403 over the key's spend limits or for a token outside the address book, 422 over its price-impact ceiling, 423 while the server wallet is paused; 202 with the approval when the swap is over its policy's approvalAboveUsd (nothing is sent until a person approves it)",
    schema: { body: SwapBody, response: { 200: SwapResult, 202: AwaitingApproval, ...writeErrors, 423: ErrorBody } },
  }),
  prepare: route({
    method: 'POST',
    url: '/swap/prepare',
    summary: 'The unsigned transactions (approval, swap) that swap from your own wallet, simulated; nothing is sent',
    schema: { body: PrepareBody, response: { 200: PreparedSwap, ...writeErrors } },
  }),
  executions: route({
    method: 'GET',
    url: '/swap/executions',
    summary: "This API key's swap executions, newest first",
    schema: { querystring: LimitQuery, response: { 200: Type.Object({ executions: Type.Array(Execution) }), ...upstreamRouteErrors } },
  }),
  execution: route({
    method: 'GET',
    url: '/swap/executions/:id',
    summary: 'One swap execution of this API key',
    schema: {
      params: IdParams,
      response: { 200: Execution, 404: ErrorBody, ...upstreamRouteErrors },
    },
  }),
  positions: route({
    method: 'GET',
    url: '/portfolio/positions',
    summary: 'Lending (Aave V3) and perpetual (GMX V2) positions of the server wallet or ?address=',
    schema: { querystring: PositionsQuery, response: { 200: Positions, ...upstreamRouteErrors } },
  }),
  launch: route({
    method: 'POST',
    url: '/launchpad/tokens',
    summary:
      "Launch an ERC-20 with a fixed supply from the server wallet. Retries are safe with an Idempotency-Key (sent, or the generated one the answer carries). 403 over the key's launches per day or when its gas would pass the key's USD caps, 423 while the server wallet is paused",
    schema: { body: LaunchBody, response: { 201: LaunchedToken, ...writeErrors, 423: ErrorBody } },
  }),
  launched: route({
    method: 'GET',
    url: '/launchpad/tokens',
    summary: 'Tokens this API key launched, newest first',
    schema: { querystring: LimitQuery, response: { 200: Type.Object({ tokens: Type.Array(LaunchedToken) }), ...upstreamRouteErrors } },
  }),
  launchedToken: route({
    method: 'GET',
    url: '/launchpad/tokens/:address',
    summary: 'A launched token, as the chain reads it now',
    schema: { params: Type.Object({ address: Address() }), response: { 200: LaunchedToken, 404: ErrorBody, ...upstreamRouteErrors } },
  }),
}
