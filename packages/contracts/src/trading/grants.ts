// Grants: limited, revocable permissions a user gives the trading service on chain (the
// TradeGrants contract) to swap the user's own tokens, and the routes that prepare, list and revoke them.
import { Type, type Static } from 'typebox'
import { ErrorBody, keyRouteErrors } from '../common/errors.ts'
import { Address, Bytes32, IntegerString, StrictObject } from '../common/primitives.ts'
import { route } from '../common/route.ts'
import { DexSchema, TokenRef } from './swaps.ts'

export const GrantPeriod = Type.Union([Type.Literal('hour'), Type.Literal('day'), Type.Literal('week')], {
  description: 'how often the amount renews',
})
export type GrantPeriod = Static<typeof GrantPeriod>
export const grantPeriodSeconds: Record<GrantPeriod, number> = { hour: 3_600, day: 86_400, week: 604_800 }

export const PrepareGrantBody = StrictObject({
  wallet: Address({ description: 'the wallet whose tokens the grant lets the service swap; it signs and sends the transactions' }),
  tokenIn: TokenRef('the token the service may sell from the wallet'),
  amountPerPeriod: IntegerString({
    description: 'the most of tokenIn the service may sell each period, in base units (100000000 = 100 USDC)',
  }),
  period: GrantPeriod,
  expiresInDays: Type.Integer({ minimum: 1, maximum: 365, default: 30, description: 'the grant ends this many days after it is made' }),
  tokensOut: Type.Array(TokenRef('a token the service may buy with it'), { minItems: 1, maxItems: 10 }),
  dexes: Type.Array(DexSchema, {
    minItems: 1,
    maxItems: 2,
    default: ['uniswap', 'camelot'],
    description: 'the DEXes whose routers the service may swap on',
  }),
})
export type PrepareGrantBody = Static<typeof PrepareGrantBody>

export const GrantTransaction = Type.Object({
  kind: Type.Union([Type.Literal('approval'), Type.Literal('grant'), Type.Literal('revoke')]),
  chainId: Type.Integer(),
  from: Address(),
  to: Address(),
  data: Type.String({ description: 'calldata, 0x-hex' }),
  value: IntegerString({ description: 'always "0"' }),
  description: Type.String({ description: 'what signing it does, in words' }),
})
export type GrantTransaction = Static<typeof GrantTransaction>

export const PreparedGrant = Type.Object({
  wallet: Address(),
  contract: Address({ description: 'the TradeGrants contract that holds the permission and enforces it' }),
  delegate: Address({ description: "the trading service's signer: the only address that can use the grant" }),
  transactions: Type.Array(GrantTransaction, {
    description:
      'send in order from the wallet: an allowance of tokenIn to the contract when the present one is short (amountPerPeriod × the periods until expiry), then the grant',
  }),
})
export type PreparedGrant = Static<typeof PreparedGrant>

export const GrantStatus = Type.Union([Type.Literal('active'), Type.Literal('revoked'), Type.Literal('expired')])

export const Grant = Type.Object({
  id: Bytes32({ description: 'the grant on chain (TradeGrants.grants(id))' }),
  wallet: Address({ description: 'the owner: where the tokens come from and where every swap pays out' }),
  status: GrantStatus,
  tokenIn: Type.String({ description: 'symbol (the address when the token is not in the address book)' }),
  tokensOut: Type.Array(Type.String()),
  dexes: Type.Array(DexSchema),
  amountPerPeriod: IntegerString({ description: 'base units of tokenIn each period' }),
  periodSeconds: Type.Integer(),
  remaining: IntegerString({ description: 'what the service may still sell in the current period (base units)' }),
  renewsAt: Type.String({ format: 'date-time', description: 'when the current period ends and the amount renews' }),
  expiresAt: Type.String({ format: 'date-time' }),
  allowance: IntegerString({ description: "the wallet's present allowance of tokenIn to the contract: swaps past it revert" }),
})
export type Grant = Static<typeof Grant>

export const GrantsQuery = Type.Object({
  wallet: Type.Optional(Address({ description: "whose grants; the key's bound wallet by default" })),
})

export const GrantList = Type.Object({ wallet: Address(), contract: Address(), delegate: Address(), grants: Type.Array(Grant) })
export type GrantList = Static<typeof GrantList>

const errors = { ...keyRouteErrors, 404: ErrorBody, 422: ErrorBody, 502: ErrorBody, 503: ErrorBody }

export const grantRoutes = {
  prepareGrant: route({
    method: 'POST',
    url: '/grants/prepare',
    summary:
      'The unsigned transactions that grant the service a limited permission to swap your own tokens: which token, how much each hour, day or week, until when, on which DEXes and into which tokens; the output always goes back to your wallet. The chain enforces it; nothing is sent',
    schema: { body: PrepareGrantBody, response: { 200: PreparedGrant, ...errors } },
  }),
  grants: route({
    method: 'GET',
    url: '/grants',
    summary: "A wallet's grants to the service with what remains of the current period, newest first",
    schema: { querystring: GrantsQuery, response: { 200: GrantList, ...errors } },
  }),
  prepareRevoke: route({
    method: 'POST',
    url: '/grants/:id/revoke',
    summary: 'The unsigned transaction that revokes a grant for good (the wallet that made it sends it); nothing is sent',
    schema: {
      params: Type.Object({ id: Bytes32() }),
      response: { 200: Type.Object({ grant: Bytes32(), transactions: Type.Array(GrantTransaction) }), ...errors },
    },
  }),
}
