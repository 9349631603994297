import { Type, type Static } from 'typebox'
import { ErrorBody, keyRouteErrors } from '../common/errors.ts'
import { Bytes32, EpochMs, FreeText, IntegerString, StrictObject, StringEnum } from '../common/primitives.ts'
import { IdParams, route } from '../common/route.ts'
import { JobPayment } from '../admin/payments.ts'
import { Approval } from '../trading/approvals.ts'
import { UnsignedTransaction } from '../trading/swaps.ts'
import { PaymentRequiredSchema } from '../x402/requirements.ts'

export const Skill = Type.Object({
  name: Type.String(),
  url: Type.String({ description: 'where the capability is served: a path of this API for built-in skills' }),
  external: Type.Boolean({ description: 'false for built-in skills, true for external ones' }),
})
export type Skill = Static<typeof Skill>

export const maxPromptLength = 4000

export const jobStatuses = ['pending', 'running', 'awaiting_approval', 'complete', 'failed', 'cancelled'] as const
export type JobStatus = (typeof jobStatuses)[number]
export const JobStatusSchema = StringEnum(jobStatuses, {
  description:
    'pending: queued; running: a worker runs it; awaiting_approval: a swap of it waits for a person (POST /approvals/:id/approve or reject; `approval` says what), then it runs on; complete: result is set; failed: error says why; cancelled: by DELETE /agent/job/:id',
})

/** What a job waiting for a person's decision shows (/v1 answers' `ats` field): the approval and where to decide it. */
export const JobAwaitingApproval = Type.Object(
  {
    jobId: Type.String(),
    status: Type.Literal('awaiting_approval'),
    approval: Approval,
    notice: Type.String({ description: 'what waits and where to approve or reject it, in plain words' }),
  },
  { description: 'ours: the job waits for a person to approve a swap (the text says where); it goes on after the decision' },
)
export type JobAwaitingApproval = Static<typeof JobAwaitingApproval>

export const PromptBody = StrictObject({
  prompt: FreeText({ minLength: 1, maxLength: maxPromptLength, description: 'what to do, in plain words' }),
  threadId: Type.Optional(
    Type.String({ minLength: 1, maxLength: 64, description: 'continue this thread of yours; a new thread when absent' }),
  ),
  context: Type.Optional(
    Type.Record(Type.String(), Type.Unknown(), {
      description: 'anything the runner should know (passed to the LLM as JSON); at most 16 KB',
    }),
  ),
})

export const PromptAccepted = Type.Object({
  jobId: Type.String(),
  threadId: Type.String(),
  status: Type.Literal('pending'),
  deadline: Type.Optional(
    EpochMs(
      "when the job must have ended so that its payment can still be settled (ms since the Unix epoch): the payment's validBefore less AGENT_JOB_PAYMENT_MARGIN_SECONDS. A job not started by then is not run, a wait for approval expires then at the latest, and a job still running or waiting then is stopped; its payment is voided (not charged)",
    ),
  ),
})

/** What a job sent from the server wallet or prepared for the payer's own wallet to sign. */
export const JobTransaction = Type.Object({
  step: Type.Integer({ description: 'the step (tool call) that made it, from 1' }),
  tool: Type.String(),
  status: Type.Union([Type.Literal('sent'), Type.Literal('prepared')], {
    description:
      'sent: from the server wallet, mined (hash, success); prepared: unsigned, for `transaction.from` to sign and send in order',
  }),
  kind: Type.Union([Type.Literal('swap'), Type.Literal('approval')]),
  hash: Type.Optional(Bytes32()),
  success: Type.Optional(Type.Boolean({ description: 'sent: whether it succeeded on chain' })),
  transaction: Type.Optional(UnsignedTransaction),
  tokenIn: Type.String(),
  tokenOut: Type.String(),
  amountIn: IntegerString({ description: 'tokenIn base units' }),
  amountOut: IntegerString({ description: 'tokenOut base units: received (sent) or expected (prepared)' }),
  amountOutMinimum: IntegerString(),
})
export type JobTransaction = Static<typeof JobTransaction>

export const JobResult = Type.Object({
  text: Type.String({ description: "the agent's answer" }),
  steps: Type.Integer({
    description: 'steps taken: each tool call and each answer of the model (the offline planner: its tool calls plus its answer)',
  }),
  toolCalls: Type.Array(Type.String(), { description: 'the names of the tools called, in order' }),
  transactions: Type.Array(JobTransaction, { description: 'what the job sent from the server wallet or prepared for your wallet' }),
  usage: Type.Optional(
    Type.Object(
      {
        promptTokens: Type.Integer({ minimum: 0 }),
        completionTokens: Type.Integer({ minimum: 0 }),
      },
      {
        description:
          'tokens of the run: what the language model reported over all its turns; the offline planner, which has no model, counts the conversation in and the answer out with the o200k_base tokenizer',
      },
    ),
  ),
  charged: Type.Optional(
    IntegerString({
      description:
        "jobs paid by credit: what the run cost, USDC base units, kept from the credit held for it: its tokens at the model's prices plus its tool calls (AGENT_CREDIT_* settings), at most the hold",
    }),
  ),
})
export type JobResult = Static<typeof JobResult>

/** The `ats_charged` of /v1 usage objects: what a credit-paid answer cost. */
export const AtsCharged = IntegerString({
  description:
    'ours, answers paid by credit: USDC base units kept from the credit held for the request (its tokens at the prices of its model, plus the tool calls of the agent); the rest of the hold goes back to the wallet',
})

/** What a job paid by credit holds and, once it ended, what it cost. */
export const JobCredit = Type.Object(
  {
    held: IntegerString({ description: 'USDC base units the gateway held from the credit when the job was created: the most it may cost' }),
    charged: Type.Optional(
      IntegerString({
        description:
          'once finished: what was kept from the hold (the rest went back): the work done when it completed or was cancelled while running, 0 when it failed or was cancelled before it started',
      }),
    ),
  },
  { description: 'jobs paid by credit (POST /agent/prompt signed in with SIWx or a session token)' },
)

export const Job = Type.Object({
  id: Type.String(),
  status: JobStatusSchema,
  createdAt: EpochMs(),
  threadId: Type.Optional(Type.String({ description: 'full form only' })),
  prompt: Type.Optional(Type.String({ description: 'full form only (complete, failed, cancelled) and in /portfolio/jobs' })),
  updatedAt: Type.Optional(EpochMs()),
  result: Type.Optional(JobResult),
  error: Type.Optional(Type.String({ description: 'failed jobs: what went wrong, for a person to read (never internals)' })),
  payment: Type.Optional(JobPayment),
  credit: Type.Optional(JobCredit),
  approval: Type.Optional(Approval),
  notice: Type.Optional(
    Type.String({ description: 'awaiting_approval: what waits and where to approve or reject it (`approval`), in plain words' }),
  ),
})
export type Job = Static<typeof Job>

/** The header of a 202 from POST /agent/prompt naming the job: the gateway ties the payment to it. */
export const jobIdHeader = 'x-ats-job-id'

/** The header of a non-streamed /v1 answer paid by credit: USDC base units kept from the hold (as its `usage.ats_charged`). */
export const chargedHeader = 'ats-charged'

export const Message = Type.Object({
  id: Type.String(),
  role: Type.Union([Type.Literal('user'), Type.Literal('assistant')]),
  content: Type.String(),
  createdAt: EpochMs(),
  toolCalls: Type.Optional(Type.Array(Type.String(), { description: 'assistant messages: the tools called' })),
  metadata: Type.Object({ jobId: Type.Optional(Type.String()) }),
})
export type Message = Static<typeof Message>

export const Thread = Type.Object({
  id: Type.String(),
  createdAt: EpochMs(),
  updatedAt: EpochMs(),
  messages: Type.Array(Message, { description: 'in conversation order' }),
})
export type Thread = Static<typeof Thread>

export const JobsQuery = Type.Object({
  limit: Type.Integer({ minimum: 1, default: 50, description: 'at most 100 are answered; a larger limit is capped, not refused' }),
})

export const EventsHeaders = Type.Object({
  'last-event-id': Type.Optional(
    Type.String({ pattern: '^[0-9]{1,9}$', description: 'resume after this event id (sent by EventSource on reconnect)' }),
  ),
})

// every /agent/* route is paid per request (x402); those with input can be a 400
const paid = { 402: PaymentRequiredSchema, 503: ErrorBody }
const errors = { 400: ErrorBody, ...paid }
const keyErrors = { ...keyRouteErrors, 503: ErrorBody }

export const agentRoutes = {
  prompt: route({
    method: 'POST',
    url: '/agent/prompt',
    summary:
      "Run a prompt as an asynchronous job; poll GET /agent/job/:id or stream GET /agent/job/:id/events. Its payment is settled only if the job completes (or is cancelled while running); a job that fails or is cancelled before it starts voids it (the job's `payment`)",
    schema: { body: PromptBody, response: { 202: PromptAccepted, 404: ErrorBody, ...errors } },
  }),
  job: route({
    method: 'GET',
    url: '/agent/job/:id',
    summary:
      'A job of yours: id, status, createdAt while pending or running; with prompt, updatedAt and result or error once finished; `payment` (pending, settled, voided or failed) for a job bought with POST /agent/prompt',
    schema: { params: IdParams, response: { 200: Job, 404: ErrorBody, ...errors } },
  }),
  cancelJob: route({
    method: 'DELETE',
    url: '/agent/job/:id',
    summary:
      'Cancel a pending, running or awaiting_approval job of yours; a running one stops within a second, and the approval a waiting one asked for is withdrawn (it can no longer be approved)',
    schema: {
      params: IdParams,
      response: { 200: Type.Object({ success: Type.Literal(true), jobId: Type.String() }), 404: ErrorBody, ...errors },
    },
  }),
  jobEvents: route({
    method: 'GET',
    url: '/agent/job/:id/events',
    produces: 'text/event-stream',
    summary:
      'Server-sent events of a job of yours: `status` (pending, running, awaiting_approval with the `approval` while a swap waits for a person, then complete with the result, failed with the error, or cancelled) and `step` (each tool call, started and finished), each with an id; with a language model also `delta` ({text, offset}: the answer text as it is produced), without an id and not replayed. Reconnect with Last-Event-ID to get the stored events you missed (the complete status carries the whole text). The stream ends with the job (an id past its last event: at once once the job is finished). At most AGENT_MAX_STREAMS_PER_OWNER (5) open streams per payer: one more is 429, not charged',
    schema: {
      params: IdParams,
      headers: EventsHeaders,
      response: { 200: Type.String({ description: 'text/event-stream' }), 404: ErrorBody, 429: ErrorBody, ...errors },
    },
  }),
  thread: route({
    method: 'GET',
    url: '/agent/thread/:id',
    summary: 'A thread of yours with its messages in order',
    schema: { params: IdParams, response: { 200: Thread, 404: ErrorBody, ...errors } },
  }),
  skills: route({
    method: 'GET',
    url: '/agent/skills',
    summary: "The agent's skills: built-in ones, then external ones",
    schema: { response: { 200: Type.Object({ skills: Type.Array(Skill) }), ...paid } },
  }),
  portfolioJobs: route({
    method: 'GET',
    url: '/portfolio/jobs',
    summary:
      "This key's agent jobs, newest first: those made with the key (/v1) and the paid jobs of the wallet bound to it (POST /admin/keys `wallet`)",
    schema: { querystring: JobsQuery, response: { 200: Type.Object({ jobs: Type.Array(Job) }), ...keyErrors } },
  }),
}
