import { Type, type Static } from 'typebox'
import { ErrorBody, keyRouteErrors } from '../common/errors.ts'
import { Address, Bytes32, EpochMs, IntegerString, StrictObject, StringEnum } from '../common/primitives.ts'
import { IdParams, route } from '../common/route.ts'

export const automationStatuses = ['active', 'paused', 'completed', 'failed'] as const
export type AutomationStatus = (typeof automationStatuses)[number]
export const AutomationStatusSchema = StringEnum(automationStatuses, {
  description:
    'active: runs on schedule; paused: does not run; completed: maxRuns reached, endAt passed, the limit order filled, a stop order fired or a TWAP ended; failed: runs failed repeatedly (statusReason says why)',
})

/** The kinds of automation; each validates its own config (docs/automation.md). */
export const automationTypes = ['recurring-buy', 'limit-order', 'twap', 'stop-loss', 'take-profit', 'trailing-stop'] as const
export type AutomationType = (typeof automationTypes)[number]

/** The types that sell on a price trigger (market-data's USD price of tokenIn), checked every AUTOMATION_TRIGGER_CHECK_MS. */
export const triggerTypes = ['stop-loss', 'take-profit', 'trailing-stop'] as const satisfies readonly AutomationType[]
export type TriggerType = (typeof triggerTypes)[number]

/** What set a run off: the price that crossed a stop order's level, or a TWAP's slice. */
export const RunTrigger = Type.Object({
  kind: StringEnum([...triggerTypes, 'twap-slice'] as const),
  detail: Type.String({ description: 'in words, e.g. "stop-loss: ETH at 2480.12 USD, at or below 2500" or "slice 3 of 10"' }),
  price: Type.Optional(Type.Number({ description: "USD per whole tokenIn that fired it (market-data's price)" })),
  threshold: Type.Optional(Type.Number({ description: 'the level the price crossed, USD' })),
  priceAt: Type.Optional(EpochMs('when market-data read that price from its source')),
  slice: Type.Optional(Type.Integer({ minimum: 1, description: "a TWAP slice's number, from 1" })),
  slices: Type.Optional(Type.Integer({ minimum: 1, description: "the TWAP's number of slices" })),
})
export type RunTrigger = Static<typeof RunTrigger>

export const AutomationSource = Type.Union([Type.Literal('server'), Type.Literal('wallet')], {
  description:
    "whose tokens each run spends: server, the server wallet's (within the key's spend policy); wallet, walletAddress's own, under the grant it made on chain (POST /grants/prepare): a run the grant cannot pay this period is skipped, and a revoked or expired grant pauses the automation",
})
export type AutomationSource = Static<typeof AutomationSource>

/** Spec section 2, Automation, plus its schedule and its outcome so far. */
export const Automation = Type.Object({
  id: Type.String(),
  name: Type.String(),
  type: Type.String({ description: `automation kind: ${automationTypes.join(', ')}` }),
  status: AutomationStatusSchema,
  walletAddress: Address({ description: 'the wallet the automation buys for: what it buys is sent there' }),
  source: AutomationSource,
  config: Type.Record(Type.String(), Type.Unknown(), {
    description:
      'recurring-buy: {tokenIn, tokenOut, amount (tokenIn base units), interval ("30s", "1h", "1d", "1w" or a cron expression), maxRuns?, endAt?, slippageBps?}; limit-order: {tokenIn, tokenOut, amount, minAmountOut (tokenOut base units), checkEvery?, endAt?, slippageBps?}; twap: {tokenIn, tokenOut, amount (the total), duration ("1h"), slices (2-1000) or interval, maxImpactBps? (100), remainder? ("carry" or "drop"), slippageBps?}; stop-loss: {tokenIn, tokenOut, amount, stopPrice (USD per whole tokenIn), takeProfitPrice?, endAt?, slippageBps?}; take-profit: {tokenIn, tokenOut, amount, takeProfitPrice, stopPrice?, endAt?, slippageBps?}; trailing-stop: {tokenIn, tokenOut, amount, trailPercent or trailAmount (USD), takeProfitPrice?, endAt?, slippageBps?} (docs/automation.md)',
  }),
  state: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], {
    description:
      'what it has seen so far: a stop order its last price {price, priceAt} and its levels (a trailing stop: highestPrice and the stopPrice that follows it); a TWAP {slicesDone, filled, carried, skipped, windowEndsAt}; null for the other types',
  }),
  createdAt: EpochMs(),
  updatedAt: EpochMs(),
  nextRunAt: Type.Union([EpochMs(), Type.Null()], {
    description: 'when it runs (recurring-buy, a TWAP slice) or checks the price (limit-order, stop orders) next; null unless active',
  }),
  runs: Type.Integer({ minimum: 0, description: 'runs that executed a swap' }),
  statusReason: Type.Union([Type.String(), Type.Null()], {
    description: 'why it is completed or failed, or what a limit order or stop order last saw',
  }),
})
export type Automation = Static<typeof Automation>

export const runStatuses = ['running', 'awaiting_approval', 'success', 'failed', 'skipped'] as const
export type RunStatus = (typeof runStatuses)[number]

export const AutomationRun = Type.Object({
  id: Type.String(),
  automationId: Type.String(),
  scheduledFor: EpochMs('the due time the run was for'),
  startedAt: EpochMs(),
  finishedAt: Type.Union([EpochMs(), Type.Null()]),
  status: StringEnum(runStatuses, {
    description:
      "running: the swap is under way; awaiting_approval: the swap is over the key's approvalAboveUsd and waits for a person (approval says where to decide; the automation starts no other run meanwhile); success: mined (txHash); failed: error says why (a reverted swap has its txHash too, an approved swap that could not be made says so); skipped: not made, counting neither as a run nor as a failure: the server wallet was paused (error says by whom and since when), or the approval was rejected, expired or withdrawn (its automation paused or ended meanwhile)",
  }),
  approval: Type.Union(
    [
      Type.Object({
        id: Type.String({ description: 'apr_…' }),
        url: Type.String({ description: 'where to see it (through the gateway); POST <url>/approve or <url>/reject decides it' }),
        expiresAt: EpochMs('when it expires undecided (the run is then skipped)'),
      }),
      Type.Null(),
    ],
    { description: 'the approval the run waits (or waited) for; null when none was needed' },
  ),
  txHash: Type.Union([Bytes32(), Type.Null()]),
  amountIn: IntegerString({ description: 'tokenIn base units' }),
  amountOut: Type.Union([IntegerString({ description: 'tokenOut base units received by the wallet' }), Type.Null()]),
  executionId: Type.Union([Type.String({ description: "trading's execution record" }), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
  trigger: Type.Union([RunTrigger, Type.Null()], {
    description: "what set the run off: a stop order's price and level, or a TWAP slice; null for the other types",
  }),
})
export type AutomationRun = Static<typeof AutomationRun>

export const CreateAutomationRequest = StrictObject({
  walletAddress: Address({
    description:
      "who receives what it buys (the server wallet pays): the key's bound wallet, or an address an admin allowed for the key (allowedRecipients in its spend policy)",
  }),
  type: Type.String({ minLength: 1, maxLength: 64, description: automationTypes.join(' or ') }),
  source: Type.Optional({ ...AutomationSource, default: 'server' }),
  name: Type.String({ minLength: 1, maxLength: 128 }),
  config: Type.Record(Type.String(), Type.Unknown()),
})
export type CreateAutomationRequest = Static<typeof CreateAutomationRequest>

const errors = { ...keyRouteErrors, 503: ErrorBody }

export const automationRoutes = {
  list: route({
    method: 'GET',
    url: '/automations',
    summary: "This key's automations for a wallet, newest first",
    schema: {
      querystring: Type.Object({ wallet: Address({ description: 'the wallet (required)' }) }),
      response: { 200: Type.Object({ automations: Type.Array(Automation) }), ...errors },
    },
  }),
  create: route({
    method: 'POST',
    url: '/automations',
    summary:
      "Create an automation (active); a recurring buy runs first at once, then every interval. walletAddress must be the key's bound wallet or on its allowedRecipients (403 otherwise); 409 past AUTOMATION_MAX_PER_KEY active or paused automations",
    schema: { body: CreateAutomationRequest, response: { 201: Type.Object({ automation: Automation }), 409: ErrorBody, ...errors } },
  }),
  get: route({
    method: 'GET',
    url: '/automations/:id',
    summary: 'One automation of this key',
    schema: { params: IdParams, response: { 200: Type.Object({ automation: Automation }), 404: ErrorBody, ...errors } },
  }),
  update: route({
    method: 'PATCH',
    url: '/automations/:id',
    summary:
      'Set the status: paused stops the runs, active resumes them on their schedule (the next scheduled time after now, never at once; 409 past AUTOMATION_MAX_PER_KEY), completed or failed ends it',
    schema: {
      params: IdParams,
      body: StrictObject({ status: AutomationStatusSchema }),
      response: { 200: Type.Object({ automation: Automation }), 404: ErrorBody, 409: ErrorBody, ...errors },
    },
  }),
  remove: route({
    method: 'DELETE',
    url: '/automations/:id',
    summary: 'Delete an automation and its run history',
    schema: { params: IdParams, response: { 200: Type.Object({ ok: Type.Literal(true) }), 404: ErrorBody, ...errors } },
  }),
  runs: route({
    method: 'GET',
    url: '/automations/:id/runs',
    summary: "An automation's runs, newest first: when, status, tx hash or error",
    schema: {
      params: IdParams,
      querystring: Type.Object({ limit: Type.Integer({ minimum: 1, maximum: 100, default: 50 }) }),
      response: { 200: Type.Object({ runs: Type.Array(AutomationRun) }), 404: ErrorBody, ...errors },
    },
  }),
}
