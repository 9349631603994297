import { Type, type Static } from 'typebox'
import { ErrorBody, keyRouteErrors } from '../common/errors.ts'
import { TierSchema } from '../common/identity.ts'
import { Address, EpochMs, IntegerString, StrictObject, StringEnum } from '../common/primitives.ts'
import { IdParams, route } from '../common/route.ts'
import { PauseWalletBody, WalletControl } from './wallet.ts'

const UsdCap = (description: string) => Type.Number({ exclusiveMinimum: 0, maximum: 1e9, description })

/** Limits on the swaps a key makes from the server wallet; the trading service enforces them on every swap path. */
export const SpendPolicy = StrictObject(
  {
    maxUsdPerSwap: Type.Optional(UsdCap('the most one swap may spend, in US dollars (not cents; decimals allowed, e.g. 250.5)')),
    maxUsdPerDay: Type.Optional(
      UsdCap('the most all swaps of this key may spend together in one UTC day, in US dollars (not cents; decimals allowed)'),
    ),
    maxPriceImpactBps: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000,
        description:
          'the highest price impact a swap may have, in basis points (1500 = 15%); a swap above it is refused (422) before anything is sent',
      }),
    ),
    allowedTokens: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 64, description: 'a token symbol ("USDC") or a 0x address' }), {
        minItems: 1,
        maxItems: 50,
        description:
          "the tokens this key may swap: both tokenIn and tokenOut must be listed. A symbol names the chain's address-book token of that symbol (never a contract that merely calls itself so); an address names that contract, and is how an admin allows a token outside the address book",
      }),
    ),
    maxLaunchesPerDay: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 1000,
        description:
          "the most tokens this key may launch in one UTC day (0: none); unset: the trading service's LAUNCH_DEFAULT_PER_DAY (3). A launch's gas counts against the USD caps as well",
      }),
    ),
    approvalAboveUsd: Type.Optional(
      UsdCap(
        'a swap worth more than this, in US dollars, is not sent until a person approves it (POST /approvals/:id/approve): POST /swap/execute answers 202 with the approval, an agent job waits in awaiting_approval, an automation run waits; unset: no approval step',
      ),
    ),
    approvers: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 64, description: 'the id of an API key (key_…)' }), {
        minItems: 1,
        maxItems: 20,
        uniqueItems: true,
        description:
          "the keys that may approve the swaps this policy holds for approval (approvalAboveUsd) and see them in GET /approvals, besides admin keys (and, for an agent payer's policy, keys bound to the payer's wallet); the key that asked never approves its own swap unless selfApprove is set. Read when a swap is held: a change applies to swaps held afterwards",
      }),
    ),
    selfApprove: Type.Optional(
      Type.Boolean({
        description:
          'true: the key that asked for a held swap may approve it itself. This gives up the second person the approval step is for: a holder of the key (or an agent or MCP client using it) can then spend above approvalAboveUsd on its own. Default false: the requester gets 403 on approve (it may still reject)',
      }),
    ),
    allowedRecipients: Type.Optional(
      Type.Array(Address({ description: 'a wallet swaps of this key may pay out to' }), {
        minItems: 1,
        maxItems: 50,
        description:
          "who besides the key's bound wallet may receive what a swap from the server wallet buys (an automation's walletAddress): without it an automation pays out only to the key's bound wallet, and a key without one cannot create automations",
      }),
    ),
  },
  {
    minProperties: 1,
    description:
      "spend limits on swaps and launches (whose gas counts in USD); at least one field. A field left out takes the trading service's default (SPEND_DEFAULT_USD_PER_SWAP, SPEND_DEFAULT_USD_PER_DAY, SPEND_DEFAULT_MAX_PRICE_IMPACT_BPS, LAUNCH_DEFAULT_PER_DAY)",
  },
)
export type SpendPolicy = Static<typeof SpendPolicy>

export const KeyEntry = Type.Object({
  id: Type.String({ description: '<key_id>' }),
  tier: TierSchema,
  label: Type.String({ maxLength: 64 }),
  prefix: Type.String({ description: 'the first characters of the raw key, to recognise it; not enough to use it' }),
  createdAt: EpochMs(),
  policy: Type.Union([SpendPolicy, Type.Null()], {
    description:
      "spend limits on swaps from the server wallet; null: none (the trading service's default caps apply: $500 a swap and $500 a day unless its settings say otherwise)",
  }),
  wallet: Type.Union([Address(), Type.Null()], {
    description:
      'the wallet bound to the key at creation: GET /portfolio/jobs shows it the paid agent jobs of that wallet, and its automations may buy for it; null: none',
  }),
})
export type KeyEntry = Static<typeof KeyEntry>

export const CreatedKey = Type.Intersect([
  KeyEntry,
  Type.Object({ key: Type.String({ description: 'the raw API key; shown in this answer only, never again' }) }),
])

export const CreateKeyBody = StrictObject({
  tier: TierSchema,
  label: Type.String({ minLength: 1, maxLength: 64 }),
  policy: Type.Optional(SpendPolicy),
  wallet: Type.Optional(
    Address({
      description:
        "bind a wallet: the key then sees that payer's agent jobs in GET /portfolio/jobs. Fixed for the key's life (revoke and create another to change it)",
    }),
  ),
})

export const SetKeyPolicyBody = StrictObject({
  policy: Type.Union([SpendPolicy, Type.Null()], { description: 'the new spend policy; null clears it' }),
})

const UsdcAmount = IntegerString({ description: 'USDC base units (6 decimals)' })
const Usd = Type.String({ description: 'dollar-formatted, e.g. $0.01' })

export const SettlementStateSchema = StringEnum(['pending', 'settling', 'settled', 'failed', 'skipped', 'voided'], {
  description:
    "pending: recorded, not yet settled (a job's payment: also while its job runs); settling: its transaction is signed, kept and broadcast, waiting for a block (txHash); settled: on chain (txHash); failed: will not settle (settleError); skipped: settlement is off; voided: never settled, its job failed or was cancelled before it started (voidReason)",
})

export const RecentPayment = Type.Object({
  payer: Type.String(),
  amount: UsdcAmount,
  route: Type.String({ description: 'method and path of the paid request' }),
  paidAt: Type.Integer({ description: 'when the gateway charged it, ms since the Unix epoch' }),
  requestId: Type.String({ description: 'x-request-id of the paid request' }),
  settlement: SettlementStateSchema,
  txHash: Type.Union([Type.String(), Type.Null()], {
    description: 'the settlement transaction: set from the moment it is signed (settling), the one on chain once settled',
  }),
  settleError: Type.Union([Type.String(), Type.Null()], { description: 'why settlement failed or is being retried' }),
  jobId: Type.Union([Type.String(), Type.Null()], {
    description: 'the agent job the payment bought (POST /agent/prompt): settled only if the job completes',
  }),
  voidReason: Type.Union([Type.String(), Type.Null()], {
    description: 'voided: why (the job\'s error, "cancelled before it started", or the authorization expired first)',
  }),
})
export type RecentPayment = Static<typeof RecentPayment>

/** how many payments, and their sum, in one settlement state */
const SettlementCount = Type.Object({ count: Type.Integer(), totalUsdc: UsdcAmount })

export const RevenueSummary = Type.Object({
  totalUsdc: UsdcAmount,
  totalUsd: Usd,
  uniquePayers: Type.Integer(),
  pricePerRequest: Usd,
  requestCount: Type.Integer({
    description: 'paid requests charged: settled and to be settled (payments voided or whose settlement failed are not counted)',
  }),
  voided: Type.Object(
    { count: Type.Integer(), totalUsdc: UsdcAmount },
    { description: 'payments never settled because their job failed or was cancelled before it started (not in the totals)' },
  ),
  recentPayments: Type.Array(RecentPayment, { description: 'the latest 20 payments, newest first, whatever their settlement' }),
  storage: Type.String({ description: 'where the ledger is kept' }),
  settlements: Type.Optional(
    Type.Object(
      {
        pending: SettlementCount,
        settling: SettlementCount,
        settled: SettlementCount,
        failed: SettlementCount,
        skipped: SettlementCount,
        voided: SettlementCount,
      },
      { description: "every payment by its settlement (a job's payment held until its job ends counts as pending)" },
    ),
  ),
  backlog: Type.Optional(
    Type.Object(
      {
        count: Type.Integer({ description: 'payments to settle: pending (a held job payment included) and settling' }),
        oldestPaidAt: Type.Union([EpochMs(), Type.Null()], { description: 'when the oldest of them was charged (null: none)' }),
        lagMs: Type.Integer({ description: 'how long the oldest has waited, ms (0: none waits)' }),
      },
      { description: 'the settlement backlog and its lag' },
    ),
  ),
})

export const DailyRevenue = Type.Object({
  date: Type.String({ description: 'YYYY-MM-DD (UTC)' }),
  count: Type.Integer(),
  totalUsdc: UsdcAmount,
  totalUsd: Usd,
})

export const RevenueHistoryQuery = StrictObject({
  days: Type.Integer({ minimum: 1, maximum: 90, default: 30, description: 'how many days back, today included' }),
})

export const BlockedPayerEntry = Type.Object({
  payer: Type.String({ description: 'lower-case address' }),
  reason: Type.String({ description: 'why a payment of theirs could not settle' }),
  since: EpochMs(),
})

const PayerParams = Type.Object({ address: Address({ description: 'the payer address' }) })

/** A payer for whom the agent executes swaps from the server wallet, within its spend policy. */
export const AgentPayer = Type.Object({
  address: Address({ description: 'the payer (checksummed)' }),
  label: Type.String({ maxLength: 64 }),
  policy: SpendPolicy,
  createdAt: EpochMs(),
  updatedAt: EpochMs(),
})
export type AgentPayer = Static<typeof AgentPayer>

export const PutAgentPayerBody = StrictObject({
  label: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'who this is, for people' })),
  // required: the agent never spends the server wallet without limits
  policy: SpendPolicy,
})

export const adminRoutes = {
  createKey: route({
    method: 'POST',
    url: '/admin/keys',
    summary: 'Create an API key, with an optional spend policy (readwrite and admin keys); the raw key is in this answer only',
    schema: { body: CreateKeyBody, response: { 201: CreatedKey, ...keyRouteErrors } },
  }),
  listKeys: route({
    method: 'GET',
    url: '/admin/keys',
    summary: 'List active API keys (no raw keys, no hashes)',
    schema: { response: { 200: Type.Object({ keys: Type.Array(KeyEntry) }), ...keyRouteErrors } },
  }),
  revokeKey: route({
    method: 'DELETE',
    url: '/admin/keys/:id',
    summary: 'Revoke an API key permanently; every gateway refuses it within a second',
    schema: {
      params: IdParams,
      response: {
        200: Type.Object({ ok: Type.Literal(true), id: Type.String(), revokedAt: Type.Integer() }),
        404: ErrorBody,
        ...keyRouteErrors,
      },
    },
  }),
  setKeyPolicy: route({
    method: 'PUT',
    url: '/admin/keys/:id/policy',
    summary: 'Set or clear (null) the spend policy of an active readwrite or admin key; it applies from the next swap',
    schema: {
      params: IdParams,
      body: SetKeyPolicyBody,
      response: { 200: KeyEntry, 404: ErrorBody, ...keyRouteErrors },
    },
  }),
  revenue: route({
    method: 'GET',
    url: '/admin/revenue',
    summary: 'Revenue from paid requests: totals, unique payers and the latest payments with their settlement',
    schema: { response: { 200: RevenueSummary, ...keyRouteErrors } },
  }),
  revenueHistory: route({
    method: 'GET',
    url: '/admin/revenue/history',
    summary: 'Revenue per UTC day, one entry per day (days without payments count 0), oldest first',
    schema: {
      querystring: RevenueHistoryQuery,
      response: { 200: Type.Object({ days: Type.Integer(), history: Type.Array(DailyRevenue) }), ...keyRouteErrors },
    },
  }),
  putAgentPayer: route({
    method: 'PUT',
    url: '/admin/agent-payers/:address',
    summary:
      "Allow the agent to execute swaps from the server wallet for this payer's paid jobs, within the spend policy (creates or replaces; other payers get swaps prepared for their own wallet)",
    schema: { params: PayerParams, body: PutAgentPayerBody, response: { 200: AgentPayer, ...keyRouteErrors } },
  }),
  listAgentPayers: route({
    method: 'GET',
    url: '/admin/agent-payers',
    summary: 'Payers the agent executes swaps for from the server wallet, oldest first',
    schema: { response: { 200: Type.Object({ payers: Type.Array(AgentPayer) }), ...keyRouteErrors } },
  }),
  deleteAgentPayer: route({
    method: 'DELETE',
    url: '/admin/agent-payers/:address',
    summary: 'Stop executing swaps for this payer; from the next swap, theirs are prepared for their own wallet',
    schema: {
      params: PayerParams,
      response: { 200: Type.Object({ ok: Type.Literal(true), address: Address() }), 404: ErrorBody, ...keyRouteErrors },
    },
  }),
  walletState: route({
    method: 'GET',
    url: '/admin/wallet',
    summary: "The server wallet's kill switch: whether spends from it are paused, why, since when and by whom",
    schema: { response: { 200: WalletControl, ...keyRouteErrors } },
  }),
  pauseWallet: route({
    method: 'POST',
    url: '/admin/wallet/pause',
    summary:
      'Pause every spend from the server wallet (swaps, agent swaps, automation runs, launches) on every replica within a second; they answer 423 until resumed. Settlement of payments (money in) goes on',
    schema: { body: PauseWalletBody, response: { 200: WalletControl, 503: ErrorBody, ...keyRouteErrors } },
  }),
  resumeWallet: route({
    method: 'POST',
    url: '/admin/wallet/resume',
    summary: 'Resume spends from the server wallet; automations run again from their next due time',
    schema: { response: { 200: WalletControl, 503: ErrorBody, ...keyRouteErrors } },
  }),
  listBlockedPayers: route({
    method: 'GET',
    url: '/admin/payers/blocked',
    summary: 'Payers refused at the edge because a payment of theirs could not settle for lack of funds',
    schema: { response: { 200: Type.Object({ payers: Type.Array(BlockedPayerEntry) }), ...keyRouteErrors } },
  }),
  unblockPayer: route({
    method: 'DELETE',
    url: '/admin/payers/blocked/:address',
    summary: 'Let a blocked payer pay again; every gateway accepts them at once',
    schema: {
      params: PayerParams,
      response: { 200: Type.Object({ ok: Type.Literal(true), payer: Type.String() }), 404: ErrorBody, ...keyRouteErrors },
    },
  }),
}
