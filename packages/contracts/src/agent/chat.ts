// The /v1 group: an OpenAI-compatible chat API backed by the agent's job pipeline. Its
// request and answer shapes are OpenAI's, so the official SDKs work unmodified; its
// errors are OpenAI's too ({error: {message, type, param, code}}), not the {error} string
// of the rest of the API, because those SDKs parse that shape (docs/v1.md).
import { Type, type Static } from 'typebox'
import { StringEnum } from '../common/primitives.ts'
import { route } from '../common/route.ts'
import { AtsCharged, JobAwaitingApproval, JobTransaction } from './http.ts'

/** The models of /v1/models: each runs the agent; they differ in the runner that answers. */
export const chatModels = [
  {
    id: 'ats-agent',
    description:
      "the agent with this deployment's runner: the configured language model with tools (LLM_BASE_URL), else the offline planner",
  },
  {
    id: 'ats-planner',
    description: 'the agent with the offline planner only: deterministic, the same prompt gives the same tool calls and words',
  },
] as const
/** `created` of every model: when the /v1 group first shipped (seconds, as OpenAI counts). */
export const chatModelsCreated = 1795478400

export const chatRoles = ['system', 'developer', 'user', 'assistant', 'tool'] as const
export const maxChatMessages = 100

export const OpenAiError = Type.Object(
  {
    error: Type.Object({
      message: Type.String({ description: 'what went wrong, in words a client can act on' }),
      type: Type.String({ description: 'invalid_request_error, permission_error, requests (rate limit) or server_error' }),
      param: Type.Union([Type.String(), Type.Null()], { description: 'the request field at fault (messages[1].role), or null' }),
      code: Type.Union([Type.String(), Type.Null()], {
        description: 'a stable code: invalid_api_key, model_not_found, rate_limit_exceeded, job_failed…',
      }),
    }),
  },
  { $id: 'OpenAiError', description: "the error shape of the /v1 group (OpenAI's), unlike the {error} string of the rest of the API" },
)
export type OpenAiError = Static<typeof OpenAiError>

export const ChatMessageIn = Type.Object(
  {
    role: StringEnum(chatRoles),
    // checked by the service rather than by a union schema, which the validator's type coercion
    // would try branch by branch: the service says which part is wrong and why
    content: Type.Optional(Type.Unknown({ description: 'text, or an array of {type: "text", text} parts' })),
    name: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
)

export const ChatCompletionRequest = Type.Object(
  {
    model: Type.String({ minLength: 1, description: `one of ${chatModels.map((m) => m.id).join(', ')} (GET /v1/models)` }),
    messages: Type.Array(ChatMessageIn, {
      minItems: 1,
      maxItems: maxChatMessages,
      description:
        'the conversation, oldest first; the last one is a user message (the prompt). system and developer messages are instructions; the earlier user and assistant messages are its history',
    }),
    stream: Type.Optional(Type.Boolean({ description: 'true: server-sent chat.completion.chunk events ending with data: [DONE]' })),
    stream_options: Type.Optional(
      Type.Object(
        { include_usage: Type.Optional(Type.Boolean({ description: 'a last chunk with usage and no choices' })) },
        { additionalProperties: true },
      ),
    ),
    n: Type.Optional(Type.Integer({ minimum: 1, maximum: 1, description: 'one answer per request (1)' })),
    user: Type.Optional(Type.String({ maxLength: 256, description: 'your end user, logged with the job' })),
  },
  {
    additionalProperties: true,
    description:
      "OpenAI's chat-completions request. Accepted and ignored: temperature, top_p, max_tokens, max_completion_tokens, seed, stop, presence_penalty, frequency_penalty, logit_bias, metadata, store, parallel_tool_calls. Refused (400): client-defined tools or functions, response_format other than text, non-text content parts",
  },
)
export type ChatCompletionRequest = Static<typeof ChatCompletionRequest>

const Usage = Type.Object({
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  ats_charged: Type.Optional(AtsCharged),
})

/** One tool call the agent made, in OpenAI's tool-call shape plus its outcome. */
export const AgentToolCall = Type.Object({
  id: Type.String({ description: 'call_<job id>_<step>' }),
  type: Type.Literal('function'),
  function: Type.Object({ name: Type.String(), arguments: Type.String({ description: 'the arguments as JSON text' }) }),
  status: Type.Union([Type.Literal('ok'), Type.Literal('error')]),
  output: Type.Optional(Type.Unknown({ description: 'what the tool returned (status ok)' })),
  error: Type.Optional(Type.String({ description: 'why the tool failed (status error)' })),
})
export type AgentToolCall = Static<typeof AgentToolCall>

/** What the agent did for an answer: an extra field OpenAI clients pass through untouched. */
export const AgentTrace = Type.Object(
  {
    jobId: Type.String({ description: 'the job: also in GET /portfolio/jobs of this key' }),
    threadId: Type.String(),
    steps: Type.Integer({ description: 'tool calls plus answers composed' }),
    tool_calls: Type.Array(AgentToolCall, { description: 'the tools the agent ran itself, in order; nothing for the client to execute' }),
    transactions: Type.Array(JobTransaction),
  },
  {
    description:
      "the agent's own tool calls and transactions: not message.tool_calls, which OpenAI clients would take as calls for them to run",
  },
)
export type AgentTrace = Static<typeof AgentTrace>

/** A live step while streaming (a tool call started, finished or failed). */
export const AgentStep = Type.Object({
  jobId: Type.String(),
  step: Type.Object({
    step: Type.Integer(),
    tool: Type.String(),
    phase: Type.Union([Type.Literal('started'), Type.Literal('finished'), Type.Literal('failed')]),
    arguments: Type.Optional(Type.String()),
    error: Type.Optional(Type.String()),
  }),
})

export const ChatCompletion = Type.Object({
  id: Type.String({ description: 'chatcmpl-<job id>' }),
  object: Type.Literal('chat.completion'),
  created: Type.Integer({ description: 'seconds since the Unix epoch' }),
  model: Type.String(),
  system_fingerprint: Type.Null(),
  choices: Type.Array(
    Type.Object({
      index: Type.Integer(),
      message: Type.Object({
        role: Type.Literal('assistant'),
        content: Type.String(),
        refusal: Type.Null(),
        annotations: Type.Array(Type.Unknown()),
      }),
      logprobs: Type.Null(),
      finish_reason: Type.Literal('stop'),
    }),
  ),
  usage: Usage,
  agent: AgentTrace,
  ats: Type.Optional(JobAwaitingApproval),
})
export type ChatCompletion = Static<typeof ChatCompletion>

export const ChatCompletionChunk = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('chat.completion.chunk'),
    created: Type.Integer(),
    model: Type.String(),
    system_fingerprint: Type.Null(),
    choices: Type.Array(
      Type.Object({
        index: Type.Integer(),
        delta: Type.Object({ role: Type.Optional(Type.Literal('assistant')), content: Type.Optional(Type.String()) }),
        logprobs: Type.Null(),
        finish_reason: Type.Union([Type.Literal('stop'), Type.Null()]),
      }),
    ),
    usage: Type.Optional(Type.Union([Usage, Type.Null()])),
    agent: Type.Optional(Type.Union([AgentStep, AgentTrace])),
    ats: Type.Optional(JobAwaitingApproval),
  },
  {
    description:
      "One server-sent event `data: <chunk>`: first the role, then one chunk per agent step (empty delta, `agent.step`), then the answer's text in pieces, then finish_reason stop with `agent` (the full trace), then usage (with stream_options.include_usage), then `data: [DONE]`. A job that waits for a person to approve a swap ends the stream early: the text says what to approve and where, and the finish chunk carries `ats`",
  },
)
export type ChatCompletionChunk = Static<typeof ChatCompletionChunk>

export const ChatModel = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  created: Type.Integer(),
  owned_by: Type.String(),
  description: Type.String(),
})

/** The failures every /v1 route in OpenAI's shape may answer (key, tier, rate limit, a service down). */
export const openAiRouteErrors = { 401: OpenAiError, 403: OpenAiError, 429: OpenAiError, 503: OpenAiError }

export const chatRoutes = {
  models: route({
    method: 'GET',
    url: '/v1/models',
    summary: "The models on offer, in OpenAI's list shape; each runs the agent",
    schema: { response: { 200: Type.Object({ object: Type.Literal('list'), data: Type.Array(ChatModel) }), ...openAiRouteErrors } },
  }),
  model: route({
    method: 'GET',
    url: '/v1/models/:model',
    summary: 'One model',
    schema: {
      params: Type.Object({ model: Type.String({ minLength: 1, maxLength: 128 }) }),
      response: { 200: ChatModel, 404: OpenAiError, ...openAiRouteErrors },
    },
  }),
  completions: route({
    method: 'POST',
    url: '/v1/chat/completions',
    summary:
      "OpenAI-compatible chat completion: the conversation runs as an agent job of this key (GET /portfolio/jobs) and the answer comes back as a chat.completion, or streamed as chat.completion.chunk events (stream: true). The agent's tool calls are in the extra `agent` field. Closing the connection before the answer cancels the job",
    alsoProduces: { mediaType: 'text/event-stream', schema: ChatCompletionChunk },
    schema: {
      body: ChatCompletionRequest,
      response: { 200: ChatCompletion, 400: OpenAiError, 500: OpenAiError, 504: OpenAiError, ...openAiRouteErrors },
    },
  }),
}

/** A failure to answer: what the kit's error handler knows of it. */
export interface Failure {
  status: number
  message: string
  /** the registry code (ATS_ERR_…), when the error is one of ours */
  code?: string | undefined
  /** the request field at fault, for validation errors */
  param?: string | undefined
}

/** OpenAI's codes for ours, where OpenAI has one; others are ours in lower case (ATS_ERR_JOB_FAILED: job_failed). */
const openAiCodes: Record<string, string> = {
  ATS_ERR_UNAUTHORIZED: 'invalid_api_key',
  ATS_ERR_RATE_LIMITED: 'rate_limit_exceeded',
  ATS_ERR_FORBIDDEN: 'insufficient_permissions',
  // a body naming a model that is not ours: a code of its own (400), OpenAI's model_not_found on the wire
  ATS_ERR_INVALID_MODEL: 'model_not_found',
  // the gateway's limit on paid requests: a code of its own, a rate limit to an OpenAI client
  ATS_ERR_PAID_RATE_LIMITED: 'rate_limit_exceeded',
}

function openAiType(status: number): string {
  if (status === 403) return 'permission_error'
  if (status === 429) return 'requests'
  if (status >= 500) return 'server_error'
  // OpenAI answers a bad key (401) and a missing model (404) as invalid_request_error too
  return 'invalid_request_error'
}

/** The body of a failure in OpenAI's error shape, as the /v1 group answers it. */
export function openAiErrorBody({ status, message, code, param }: Failure): OpenAiError {
  const ours = code?.startsWith('ATS_ERR_') ? (openAiCodes[code] ?? code.slice('ATS_ERR_'.length).toLowerCase()) : null
  return { error: { message, type: openAiType(status), param: param ?? null, code: ours } }
}
