import { Type, type Static } from 'typebox'
import { ErrorBody, upstreamRouteErrors } from '../common/errors.ts'
import { Address, EpochMs, IntegerString, StrictObject, StringEnum } from '../common/primitives.ts'
import { IdParams, route } from '../common/route.ts'
import { SwapResult } from './swaps.ts'

/**
 * A swap held for a person's decision (a spend policy's approvalAboveUsd): pending until
 * approved (the swap then runs once, with a fresh quote under the same slippage and impact
 * limits), rejected, or expired (APPROVAL_TTL_MS, 15 minutes by default). Nothing is sent
 * before approval.
 */
export const approvalStatuses = ['pending', 'approved', 'rejected', 'expired'] as const
export type ApprovalStatus = (typeof approvalStatuses)[number]
export const ApprovalStatusSchema = StringEnum(approvalStatuses, {
  description: 'pending: waiting for a decision; approved: the swap ran (see execution); rejected or expired: nothing was sent',
})

export const Approval = Type.Object({
  id: Type.String({ description: 'apr_…' }),
  status: ApprovalStatusSchema,
  reason: Type.String({
    description:
      'why it waits, e.g. "this swap is worth $50.00, over the approval threshold of $10.00 set by the spend policy of key key_abc"',
  }),
  swap: Type.Object({
    tokenIn: Type.String({ description: 'as asked (symbol or address)' }),
    tokenOut: Type.String(),
    tokenInAddress: Type.String(),
    tokenOutAddress: Type.String(),
    amountIn: IntegerString(),
    dex: Type.String(),
    slippageBps: Type.Integer(),
    recipient: Type.Union([Type.String(), Type.Null()]),
    from: Type.Optional(Address({ description: "the user's wallet the swap spends under its grant; absent: the server wallet" })),
  }),
  quote: Type.Object(
    {
      amountOut: IntegerString({ description: 'tokenOut the swap would have bought when it was asked' }),
      amountOutMinimum: IntegerString(),
      priceImpactBps: Type.Number(),
      usdValue: Type.Union([Type.Number(), Type.Null()], { description: 'what the swap is worth in USD (null: no trusted price)' }),
      blockNumber: IntegerString(),
    },
    { description: 'the quote when approval was asked; approving quotes afresh' },
  ),
  policy: Type.Object({
    owner: Type.String({ description: 'whose spend policy asked: "key key_abc" or "payer 0x…"' }),
    approvalAboveUsd: Type.Number(),
    approvers: Type.Optional(
      Type.Array(Type.String(), {
        description: 'the keys the policy names as approvers (besides admin keys), as it was when the swap was held',
      }),
    ),
    selfApprove: Type.Optional(
      Type.Boolean({ description: 'whether the policy lets the key that asked approve its own swap (otherwise 403)' }),
    ),
  }),
  requestedBy: Type.Object({
    keyId: Type.Union([Type.String(), Type.Null()]),
    ownerId: Type.Union([Type.String(), Type.Null()], { description: 'the payer, for a paid agent job without a key' }),
    jobId: Type.Union([Type.String(), Type.Null()]),
    automationRunId: Type.Union([Type.String(), Type.Null()]),
  }),
  createdAt: EpochMs(),
  expiresAt: EpochMs(),
  expiresWithPayment: Type.Optional(
    Type.Boolean({
      description:
        "true: expiresAt is earlier than APPROVAL_TTL_MS would make it, because the paid agent job that asked must end while its x402 payment can still be settled (the payment's validBefore less the agent's AGENT_JOB_PAYMENT_MARGIN_SECONDS); the job is voided if nobody decides by then",
    }),
  ),
  decidedAt: Type.Union([EpochMs(), Type.Null()]),
  decidedBy: Type.Union([Type.String(), Type.Null()], {
    description:
      'the id of the key that approved or rejected it (an admin key too); "requester" when its job or automation run gave it up; null while pending or when it expired',
  }),
  decisionReason: Type.Optional(
    Type.Union([Type.String(), Type.Null()], { description: 'the reason given with a reject, or by a requester that gave it up' }),
  ),
  result: Type.Union([SwapResult, Type.Null()], { description: 'the swap, once approved and mined' }),
  error: Type.Union([Type.String(), Type.Null()], {
    description: 'why the approved swap was not made (refused by the policy at approval time, reverted…), or why it was abandoned',
  }),
  links: Type.Object(
    {
      approve: Type.String(),
      reject: Type.String(),
      self: Type.String(),
      console: Type.Optional(
        Type.String({
          description:
            "the approval's page in the web console (through the gateway), where a person decides it: a path, or a whole URL when trading's TRADING_PUBLIC_URL is set",
        }),
      ),
    },
    { description: 'the routes that decide it (through the gateway)' },
  ),
})
export type Approval = Static<typeof Approval>

/** What POST /swap/execute (202) and trading.swap.execute answer when the swap waits for approval. */
export const AwaitingApproval = Type.Object({
  status: Type.Literal('awaiting_approval'),
  approval: Approval,
  idempotencyKey: Type.Optional(
    Type.String({ description: 'the Idempotency-Key of the execute: a repeat with it answers this approval again' }),
  ),
})
export type AwaitingApproval = Static<typeof AwaitingApproval>

export const isAwaitingApproval = (value: unknown): value is AwaitingApproval =>
  typeof value === 'object' && value !== null && (value as { status?: unknown }).status === 'awaiting_approval'

/** The approvals of the swaps POST /swap/execute holds for a person's decision. */
export const approvalRoutes = {
  approvals: route({
    method: 'GET',
    url: '/approvals',
    summary:
      "The swaps waiting for a person's decision (and decided ones with ?status=), newest first: this key's, those whose spend policy names this key in approvers, a bound wallet's payer's, or every one for an admin key",
    schema: {
      querystring: StrictObject({
        status: Type.Optional(ApprovalStatusSchema),
        limit: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
      }),
      response: { 200: Type.Object({ approvals: Type.Array(Approval) }), ...upstreamRouteErrors },
    },
  }),
  approval: route({
    method: 'GET',
    url: '/approvals/:id',
    summary: 'One approval this key asked for or may decide (any, for an admin key)',
    schema: { params: IdParams, response: { 200: Approval, 404: ErrorBody, ...upstreamRouteErrors } },
  }),
  approve: route({
    method: 'POST',
    url: '/approvals/:id/approve',
    summary:
      "Approve a waiting swap: it runs now, once (a repeat, or two approvals at once, answer the same swap), with a fresh quote under the same slippage and price-impact limits, and the job or automation run behind it goes on. For someone other than the key that asked: an admin key, a key the spend policy names in approvers, or (a payer's swap) a key bound to the payer's wallet; the key that asked gets 403 unless its policy sets selfApprove. 409 when it was rejected or expired",
    schema: { params: IdParams, response: { 200: Approval, 404: ErrorBody, 409: ErrorBody, 423: ErrorBody, ...upstreamRouteErrors } },
  }),
  reject: route({
    method: 'POST',
    url: '/approvals/:id/reject',
    summary:
      'Reject a waiting swap: nothing is sent, and the job or automation run behind it goes on without it. 409 when it was approved or expired',
    schema: {
      params: IdParams,
      body: Type.Optional(StrictObject({ reason: Type.Optional(Type.String({ maxLength: 500 })) })),
      response: { 200: Approval, 404: ErrorBody, 409: ErrorBody, ...upstreamRouteErrors },
    },
  }),
}
