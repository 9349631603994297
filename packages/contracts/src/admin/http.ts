import { Type, type Static } from 'typebox'
import { ErrorBody } from '../common/errors.ts'
import { TierSchema } from '../common/identity.ts'
import { Address, EpochMs, IntegerString } from '../common/primitives.ts'
import { route } from '../common/route.ts'

export const KeyEntry = Type.Object({
  id: Type.String({ description: '<key_id>' }),
  tier: TierSchema,
  label: Type.String({ maxLength: 64 }),
  prefix: Type.String({ description: 'the first characters of the raw key, to recognise it; not enough to use it' }),
  createdAt: EpochMs(),
})
export type KeyEntry = Static<typeof KeyEntry>

export const CreatedKey = Type.Intersect([
  KeyEntry,
  Type.Object({ key: Type.String({ description: 'the raw API key; shown in this answer only, never again' }) }),
])

export const CreateKeyBody = Type.Object(
  {
    tier: TierSchema,
    label: Type.String({ minLength: 1, maxLength: 64 }),
  },
  { additionalProperties: false },
)
export type CreateKeyBody = Static<typeof CreateKeyBody>

const KeyIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })

const UsdcAmount = IntegerString({ description: 'USDC base units (6 decimals)' })
const Usd = Type.String({ description: 'dollar-formatted, e.g. $0.01' })

export const SettlementStateSchema = Type.Unsafe<'pending' | 'settling' | 'settled' | 'failed' | 'skipped'>({
  type: 'string',
  enum: ['pending', 'settling', 'settled', 'failed', 'skipped'],
  description: 'pending: recorded, not yet settled; settling: submitted; settled: on chain (txHash); failed: will not settle (settleError); skipped: settlement is off',
})

export const RecentPayment = Type.Object({
  payer: Type.String(),
  amount: UsdcAmount,
  route: Type.String({ description: 'method and path of the paid request' }),
  paidAt: Type.Integer({ description: 'when the gateway charged it, ms since the Unix epoch' }),
  requestId: Type.String({ description: 'x-request-id of the paid request' }),
  settlement: SettlementStateSchema,
  txHash: Type.Union([Type.String(), Type.Null()], { description: 'the settling transaction, once known' }),
  settleError: Type.Union([Type.String(), Type.Null()], { description: 'why settlement failed or is being retried' }),
})
export type RecentPayment = Static<typeof RecentPayment>

export const RevenueSummary = Type.Object({
  totalUsdc: UsdcAmount,
  totalUsd: Usd,
  uniquePayers: Type.Integer(),
  pricePerRequest: Usd,
  requestCount: Type.Integer({ description: 'paid requests charged (payments whose settlement failed are not counted)' }),
  recentPayments: Type.Array(RecentPayment, { description: 'the latest 20 payments, newest first, whatever their settlement' }),
  storage: Type.String({ description: 'where the ledger is kept' }),
})
export type RevenueSummary = Static<typeof RevenueSummary>

export const DailyRevenue = Type.Object({
  date: Type.String({ description: 'YYYY-MM-DD (UTC)' }),
  count: Type.Integer(),
  totalUsdc: UsdcAmount,
  totalUsd: Usd,
})

export const RevenueHistoryQuery = Type.Object(
  { days: Type.Integer({ minimum: 1, maximum: 90, default: 30, description: 'how many days back, today included' }) },
  { additionalProperties: false },
)

export const BlockedPayerEntry = Type.Object({
  payer: Type.String({ description: 'lower-case address' }),
  reason: Type.String({ description: 'why a payment of theirs could not settle' }),
  since: EpochMs(),
})

const PayerParams = Type.Object({ address: Address({ description: 'the payer address' }) })

const errors = { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 429: ErrorBody }

export const adminRoutes = {
  createKey: route({
    method: 'POST',
    url: '/admin/keys',
    summary: 'Create an API key; the raw key is in this answer only',
    schema: { body: CreateKeyBody, response: { 201: CreatedKey, ...errors } },
  }),
  listKeys: route({
    method: 'GET',
    url: '/admin/keys',
    summary: 'List active API keys (no raw keys, no hashes)',
    schema: { response: { 200: Type.Object({ keys: Type.Array(KeyEntry) }), ...errors } },
  }),
  revokeKey: route({
    method: 'DELETE',
    url: '/admin/keys/:id',
    summary: 'Revoke an API key permanently; every gateway refuses it within a second',
    schema: {
      params: KeyIdParams,
      response: {
        200: Type.Object({ ok: Type.Literal(true), id: Type.String(), revokedAt: Type.Integer() }),
        404: ErrorBody,
        ...errors,
      },
    },
  }),
  revenue: route({
    method: 'GET',
    url: '/admin/revenue',
    summary: 'Revenue from paid requests: totals, unique payers and the latest payments with their settlement',
    schema: { response: { 200: RevenueSummary, ...errors } },
  }),
  revenueHistory: route({
    method: 'GET',
    url: '/admin/revenue/history',
    summary: 'Revenue per UTC day, one entry per day (days without payments count 0), oldest first',
    schema: {
      querystring: RevenueHistoryQuery,
      response: { 200: Type.Object({ days: Type.Integer(), history: Type.Array(DailyRevenue) }), ...errors },
    },
  }),
  listBlockedPayers: route({
    method: 'GET',
    url: '/admin/payers/blocked',
    summary: 'Payers refused at the edge because a payment of theirs could not settle for lack of funds',
    schema: { response: { 200: Type.Object({ payers: Type.Array(BlockedPayerEntry) }), ...errors } },
  }),
  unblockPayer: route({
    method: 'DELETE',
    url: '/admin/payers/blocked/:address',
    summary: 'Let a blocked payer pay again; every gateway accepts them at once',
    schema: {
      params: PayerParams,
      response: { 200: Type.Object({ ok: Type.Literal(true), payer: Type.String() }), 404: ErrorBody, ...errors },
    },
  }),
}
