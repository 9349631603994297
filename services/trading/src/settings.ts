// The settings of trading: swap deadlines and receipt waits, quote caching, spend limits and defaults, launches, approvals.
import { addressPattern, bytes32Pattern } from '@ats/contracts'
import { isHttpUrl, msSetting } from '@ats/service-kit'
import { Type } from 'typebox'

const usdLimit = (description: string) => Type.Optional(Type.Number({ exclusiveMinimum: 0, description }))
const usdDefault = (description: string) => Type.Number({ exclusiveMinimum: 0, default: 500, description })

export const tradingSettings = {
  SWAP_DEADLINE_SECONDS: Type.Integer({
    minimum: 10,
    maximum: 3600,
    default: 300,
    description: 'a swap sent reverts if not mined within this many seconds',
  }),
  RECEIPT_TIMEOUT_MS: msSetting(
    'how long an execute waits for its receipt before answering 504 (repeat with the same Idempotency-Key to pick it up)',
    60_000,
    1000,
  ),
  RECEIPT_POLL_MS: msSetting('how often a receipt is looked for', 250, 10),
  QUOTE_BLOCK_CACHE_MS: msSetting('how long quotes reuse the latest block number (quotes are cached per block)', 250, 0),
  SPEND_MAX_USD_PER_SWAP: usdLimit('wallet-wide cap on one swap from the server wallet, in USD; unset: none'),
  SPEND_MAX_USD_PER_DAY: usdLimit('wallet-wide cap on all swaps from the server wallet per UTC day, in USD; unset: none'),
  SPEND_DEFAULT_USD_PER_SWAP: usdDefault(
    'cap on one swap of a key (or allowlisted payer) whose spend policy sets no maxUsdPerSwap, in USD',
  ),
  SPEND_DEFAULT_USD_PER_DAY: usdDefault(
    "cap on a key's (or allowlisted payer's) swaps per UTC day when its spend policy sets no maxUsdPerDay, in USD",
  ),
  SPEND_UNLIMITED: Type.Boolean({
    default: false,
    description:
      'true: keys whose policy sets no USD cap spend the server wallet without the default caps (only SPEND_MAX_USD_* apply); logged as a warning at start',
  }),
  LAUNCH_DEFAULT_PER_DAY: Type.Integer({
    minimum: 0,
    maximum: 1000,
    default: 3,
    description:
      "tokens a key may launch per UTC day when its spend policy sets no maxLaunchesPerDay (0: none); a launch's gas counts against the key's USD caps as well",
  }),
  SPEND_DEFAULT_MAX_PRICE_IMPACT_BPS: Type.Integer({
    minimum: 1,
    maximum: 10_000,
    default: 1500,
    description:
      'price-impact ceiling of swaps whose spend policy sets no maxPriceImpactBps, in basis points (1500 = 15%); above it execute answers 422',
  }),
  GRANT_DELEGATE_PRIVATE_KEY: Type.Optional(
    Type.String({
      pattern: bytes32Pattern,
      secret: true,
      description:
        "the signer that swaps users' own tokens under the grants they made on chain (TradeGrants); never the server wallet's key, and it holds only gas. Unset: swaps from users' wallets and the /grants routes answer 503",
    }),
  ),
  TRADE_GRANTS_ADDRESS: Type.Optional(
    Type.String({
      pattern: addressPattern,
      description:
        'the TradeGrants contract; unset: its deterministic CREATE2 address (docs/grants.md), which the delegate deploys itself on the devnet',
    }),
  ),
  GRANTS_FROM_BLOCK: Type.Integer({
    minimum: 0,
    default: 0,
    description: "the block TradeGrants was deployed at: reading a wallet's grants starts there",
  }),
  APPROVAL_TTL_MS: msSetting(
    "how long a swap held by a spend policy's approvalAboveUsd waits for a person's decision before it expires and is abandoned (nothing sent), in ms",
    900_000,
    1000,
  ),
  TRADING_PUBLIC_URL: Type.Refine(
    Type.String({
      default: '',
      description:
        "the gateway as people reach it (e.g. https://api.example.com), put before an approval's web console link (links.console, in webhooks and job notices); unset: a path, /console/#/approvals/…",
    }),
    (raw) => raw === '' || isHttpUrl(raw),
    () => 'must be an absolute http(s) URL',
  ),
}
