// The shapes of a swap: DEXes, quotes, the swap asked and its result, an unsigned swap for the caller's wallet, executions.
import { Type, type Static } from 'typebox'
import { Address, Bytes32, EpochMs, IntegerString, StrictObject, StringEnum } from '../common/primitives.ts'

/** The DEXes the trading service quotes and swaps on; the first is the default. */
export const dexes = ['uniswap', 'camelot'] as const
export type DexName = (typeof dexes)[number]
export const DexSchema = StringEnum(dexes, {
  default: 'uniswap',
  description:
    'uniswap: Uniswap V3 (QuoterV2 over the 0.01%, 0.05%, 0.3% and 1% fee tiers, the best wins); camelot: Camelot (Algebra Integral, one pool per pair, dynamic fee)',
})

export const TokenRef = (description: string) =>
  Type.String({ minLength: 1, maxLength: 64, description: `${description}: a symbol (WETH, USDC …) or a token address` })
/** An amount as the client typed it; the service says plainly when it is not a positive integer. */
const AmountIn = Type.String({
  minLength: 1,
  maxLength: 80,
  description: 'amount of tokenIn in its base units, a positive integer string (1 USDC = "1000000")',
})

export const QuoteQuery = Type.Object({
  tokenIn: TokenRef('the token sold'),
  tokenOut: TokenRef('the token bought'),
  amountIn: AmountIn,
  dex: Type.Optional(DexSchema),
})

export const Quote = Type.Object({
  dex: DexSchema,
  tokenIn: Type.String({ description: 'symbol of the token sold' }),
  tokenOut: Type.String({ description: 'symbol of the token bought' }),
  amountIn: IntegerString({ description: 'tokenIn base units' }),
  amountOut: IntegerString({ description: "tokenOut base units, from the DEX's own quoter at blockNumber" }),
  priceImpactBps: Type.Integer({
    minimum: 0,
    description:
      "how far the execution price is below the pools' mid price before the trade, in basis points; the pool fee is not counted (it is in `fees`), so a tiny trade has an impact of 0",
  }),
  priceImpactCeilingBps: Type.Integer({
    minimum: 1,
    maximum: 10_000,
    description:
      "the default price-impact ceiling of swaps from the server wallet (SPEND_DEFAULT_MAX_PRICE_IMPACT_BPS, 1500 = 15%); a key's spend policy may set its own (maxPriceImpactBps), which execute applies",
  }),
  exceedsPriceImpactCeiling: Type.Boolean({
    description: 'true: priceImpactBps is over priceImpactCeilingBps, so an execute of this swap would be refused (422)',
  }),
  route: Type.Array(Type.String(), { description: 'the path as token symbols, e.g. ["ARB","WETH","WBTC"] when routed through WETH' }),
  pools: Type.Array(Address(), { description: 'the pool of each hop' }),
  fees: Type.Array(Type.Integer(), { description: 'the fee of each hop in hundredths of a basis point (500 = 0.05%)' }),
  blockNumber: IntegerString({ description: 'the block the quote was read at' }),
})
export type Quote = Static<typeof Quote>

export const SwapBody = StrictObject({
  ...QuoteQuery.properties,
  from: Type.Optional(
    Address({
      description:
        "swap from this wallet's own tokens under its grant (POST /grants/prepare), paying out to it; the key must be bound to the wallet. Absent: the server wallet",
    }),
  ),
  slippageBps: Type.Integer({
    minimum: 0,
    maximum: 5000,
    default: 50,
    description:
      'the most the received amount may fall below the quote, in basis points (50 = 0.5%); amountOutMinimum = quote × (10000 − slippageBps) / 10000',
  }),
})
export type SwapBody = Static<typeof SwapBody>

export const SwapResult = Type.Object({
  success: Type.Boolean({
    description: 'true when the swap transaction was mined and succeeded; false when it reverted (hash says which)',
  }),
  hash: Bytes32({ description: 'the swap transaction' }),
  dex: DexSchema,
  tokenIn: Type.String(),
  tokenOut: Type.String(),
  amountIn: IntegerString(),
  amountOut: IntegerString({
    description: 'tokenOut received by the server wallet (or the recipient), read from the Transfer logs of the receipt; "0" when reverted',
  }),
  amountOutMinimum: IntegerString({ description: 'the least the swap accepted' }),
  route: Type.Array(Type.String()),
  blockNumber: IntegerString({ description: 'the block the swap was mined in' }),
  executionId: Type.String({ description: 'the record of this execution (GET /swap/executions/:id)' }),
  from: Type.Optional(
    Address({ description: "the wallet the swap spent and paid out to, under grant grantId (absent: the server wallet's swap)" }),
  ),
  grantId: Type.Optional(Bytes32({ description: 'the TradeGrants grant the swap ran under' })),
  idempotencyKey: Type.Optional(
    Type.String({
      description:
        'the Idempotency-Key this execute ran under: the one sent, or one generated when none was (also the idempotency-key header); a repeat with it returns this result and swaps nothing more',
    }),
  ),
})
export type SwapResult = Static<typeof SwapResult>

export const PrepareBody = StrictObject({
  ...SwapBody.properties,
  from: Address({ description: 'the wallet that will sign and send the transactions' }),
})

export const UnsignedTransaction = Type.Object({
  kind: Type.Union([Type.Literal('approval'), Type.Literal('swap')]),
  chainId: Type.Integer(),
  from: Address(),
  to: Address(),
  data: Type.String({ description: 'calldata, 0x-hex' }),
  value: IntegerString({ description: 'wei to send with it (always "0": tokens only)' }),
  gas: IntegerString({
    description: 'a gas limit: the estimate plus 25%, or a fixed allowance when the estimate needs the approval first',
  }),
})
export type UnsignedTransaction = Static<typeof UnsignedTransaction>

export const PreparedSwap = Type.Object({
  from: Address(),
  dex: DexSchema,
  tokenIn: Type.String(),
  tokenOut: Type.String(),
  amountIn: IntegerString(),
  expectedAmountOut: IntegerString({ description: 'the quote at blockNumber' }),
  amountOutMinimum: IntegerString({ description: 'the swap reverts below this' }),
  route: Type.Array(Type.String()),
  deadline: Type.Integer({ description: 'unix seconds after which the swap reverts' }),
  blockNumber: IntegerString(),
  transactions: Type.Array(UnsignedTransaction, {
    description: 'send in order, each after the previous one is mined: an approval when the allowance is short, then the swap',
  }),
  simulation: Type.Object({
    ok: Type.Boolean({ description: 'every transaction succeeds against the current chain state, in order' }),
    error: Type.Optional(Type.String({ description: 'why not: the revert reason, or what the wallet lacks' })),
  }),
})
export type PreparedSwap = Static<typeof PreparedSwap>

export const ExecutionStatus = StringEnum(['pending', 'submitted', 'success', 'reverted', 'failed'], {
  description:
    'pending: checked, not sent yet; submitted: sent, waiting for the receipt; success / reverted: mined; failed: never sent (error says why)',
})

export const Execution = Type.Object({
  id: Type.String(),
  status: ExecutionStatus,
  dex: DexSchema,
  tokenIn: Type.String(),
  tokenOut: Type.String(),
  amountIn: IntegerString(),
  quotedAmountOut: IntegerString(),
  amountOutMinimum: IntegerString(),
  amountOut: Type.Union([IntegerString(), Type.Null()], { description: 'received, once mined' }),
  usdValue: Type.Number({ description: 'the USD value of the swap when it was checked against the spend policy' }),
  hash: Type.Union([Bytes32(), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
  requestedBy: Type.Object({
    keyId: Type.Union([Type.String(), Type.Null()]),
    jobId: Type.Union([Type.String(), Type.Null()]),
    automationRunId: Type.Union([Type.String(), Type.Null()]),
  }),
  createdAt: EpochMs(),
  updatedAt: EpochMs(),
})
export type Execution = Static<typeof Execution>
