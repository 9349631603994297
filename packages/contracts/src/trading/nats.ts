import { Type, type Static } from 'typebox'
import { endpoint } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { Address, IntegerString, StrictObject } from '../common/primitives.ts'
import { IdParams } from '../common/route.ts'
import { Approval, AwaitingApproval } from './approvals.ts'
import { GrantList } from './grants.ts'
import { Positions } from './http.ts'
import { PreparedSwap, PrepareBody, Quote, QuoteQuery, SwapBody, SwapResult } from './swaps.ts'

/**
 * trading.swap.execute request: the HTTP body plus the idempotency key (required here: every
 * caller over NATS is a job step or an automation run that may be retried) and what asked.
 * The API key travels in the identity headers (callContextOf); its spend policy applies.
 */
export const ExecuteRequest = StrictObject({
  ...SwapBody.properties,
  idempotencyKey: Type.String({
    minLength: 1,
    maxLength: 255,
    description: 'e.g. "job:<jobId>:step:<n>:<content hash>" or "run:<runId>"',
  }),
  jobId: Type.Optional(Type.String({ maxLength: 64, description: 'the agent job that asked' })),
  automationRunId: Type.Optional(Type.String({ maxLength: 64, description: 'the automation run that asked' })),
  decideBy: Type.Optional(
    Type.Integer({
      minimum: 0,
      description:
        "ms since the Unix epoch: a swap held for approval expires no later than this (a paid job's payment deadline), with expiresWithPayment",
    }),
  ),
  recipient: Type.Optional(
    Address({ description: 'who receives tokenOut (an automation buys for its wallet); the server wallet when absent' }),
  ),
  fromGrant: Type.Optional(
    Type.Boolean({
      description:
        "without from: swap from the caller's own wallet (the key's bound wallet, or the payer) when it has an active grant for tokenIn; otherwise as without it (the agent's swaps)",
    }),
  ),
})

export const TokenList = Type.Object({
  chainId: Type.Integer(),
  tokens: Type.Array(Type.Object({ symbol: Type.String(), address: Address(), decimals: Type.Integer({ minimum: 0, maximum: 255 }) }), {
    description: "the chain's token registry: what quotes and swaps accept by symbol",
  }),
})
export type TokenList = Static<typeof TokenList>

const ApprovalReply = Type.Object({ approval: Type.Union([Approval, Type.Null()]) })

export const PositionsRequest = Type.Object({ address: Type.Optional(Address()) })

/** trading's NATS endpoints: the agent's tools and the automation scheduler trade without HTTP. */
export function tradingChannels(namespace: string) {
  return {
    quote: endpoint(subjectOf(namespace, 'trading', 'swap.quote'), QuoteQuery, Quote),
    /** a swap, or (a spend policy's approvalAboveUsd) the approval it waits for: nothing was sent then */
    execute: endpoint(subjectOf(namespace, 'trading', 'swap.execute'), ExecuteRequest, Type.Union([SwapResult, AwaitingApproval])),
    /** one approval by id, as its requester sees it (a job or run waiting for it asks every APPROVAL_POLL_MS); null when unknown */
    approval: endpoint(subjectOf(namespace, 'trading', 'approvals.get'), IdParams, ApprovalReply),
    /**
     * the requester gives a pending approval up (its job was cancelled, its automation paused or
     * deleted): it becomes rejected with decidedBy "requester" and can no longer be approved; an
     * approval already decided is answered as it is
     */
    approvalWithdraw: endpoint(
      subjectOf(namespace, 'trading', 'approvals.withdraw'),
      Type.Object({ ...IdParams.properties, reason: Type.String({ minLength: 1, maxLength: 500 }) }),
      ApprovalReply,
    ),
    prepare: endpoint(subjectOf(namespace, 'trading', 'swap.prepare'), PrepareBody, PreparedSwap),
    positions: endpoint(subjectOf(namespace, 'trading', 'positions'), PositionsRequest, Positions),
    /** a wallet's grants to the service (the agent asks whether a payer's swap can run under one) */
    grants: endpoint(subjectOf(namespace, 'trading', 'grants.list'), Type.Object({ wallet: Address() }), GrantList),
    /** what a wallet holds of one of the address book's tokens, in base units ("sell half my WETH") */
    balance: endpoint(
      subjectOf(namespace, 'trading', 'balance'),
      Type.Object({ wallet: Address(), token: Type.String({ minLength: 1, maxLength: 64, description: 'a symbol or address' }) }),
      Type.Object({ token: Address(), balance: IntegerString({ description: 'base units' }) }),
    ),
    /** the tokens known by symbol, with their decimals (the agent turns "1.5 WETH" into base units) */
    tokens: endpoint(subjectOf(namespace, 'trading', 'tokens'), StrictObject({}), TokenList),
  }
}
export type TradingChannels = ReturnType<typeof tradingChannels>
