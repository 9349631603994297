// POST /v1/messages: Anthropic's Messages API over the agent's job pipeline, so Anthropic's
// SDKs work unmodified (they send the key as x-api-key, which the gateway accepts on this route
// only). Request, answer, stream events and errors are Anthropic's shapes (docs/v1.md).
import { Type, type Static } from 'typebox'
import { StringEnum } from '../common/primitives.ts'
import { route } from '../common/route.ts'
import { AgentStep, AgentTrace, chatModels, maxChatMessages, type Failure } from './chat.ts'
import { AtsCharged, JobAwaitingApproval } from './http.ts'

export const anthropicErrorTypes = [
  'invalid_request_error',
  'authentication_error',
  'permission_error',
  'not_found_error',
  'request_too_large',
  'rate_limit_error',
  'api_error',
  'timeout_error',
  'overloaded_error',
] as const
export type AnthropicErrorType = (typeof anthropicErrorTypes)[number]

export const AnthropicError = Type.Object(
  {
    type: Type.Literal('error'),
    error: Type.Object({
      type: StringEnum(anthropicErrorTypes, { description: 'the kind of failure, from the status' }),
      message: Type.String({ description: 'what went wrong; a field at fault is named in it (messages[1].content[0])' }),
    }),
  },
  {
    $id: 'AnthropicError',
    description: "the error shape of POST /v1/messages (Anthropic's), unlike the {error} string of the rest of the API",
  },
)
export type AnthropicError = Static<typeof AnthropicError>

function anthropicType(status: number): AnthropicErrorType {
  if (status === 401) return 'authentication_error'
  if (status === 403) return 'permission_error'
  if (status === 404) return 'not_found_error'
  if (status === 413) return 'request_too_large'
  if (status === 429) return 'rate_limit_error'
  if (status === 503) return 'overloaded_error'
  if (status === 504) return 'timeout_error'
  if (status >= 500) return 'api_error'
  return 'invalid_request_error'
}

/** The body of a failure in Anthropic's error shape, as POST /v1/messages answers it. */
export function anthropicErrorBody({ status, message }: Failure): AnthropicError {
  return { type: 'error', error: { type: anthropicType(status), message } }
}

// content and system are checked by the service, not by union schemas the validator would try
// branch by branch with type coercion: the service says which block is wrong and why
const Content = Type.Unknown({
  description: 'text, or an array of {type: "text", text} blocks; image, document, tool_use and tool_result blocks are refused',
})

export const MessageIn = Type.Object(
  {
    role: StringEnum(['user', 'assistant']),
    content: Content,
  },
  { additionalProperties: true },
)

export const MessagesRequest = Type.Object(
  {
    model: Type.String({ minLength: 1, description: `one of ${chatModels.map((m) => m.id).join(', ')}` }),
    max_tokens: Type.Integer({
      minimum: 1,
      description: "required by Anthropic's API and accepted; it does not cut the agent's answer, which is as long as the agent makes it",
    }),
    messages: Type.Array(MessageIn, {
      minItems: 1,
      maxItems: maxChatMessages,
      description: 'the conversation, oldest first; the last one is a user message (the prompt), the earlier ones its history',
    }),
    system: Type.Optional(Type.Unknown({ description: 'instructions: text, or an array of {type: "text", text} blocks' })),
    stream: Type.Optional(Type.Boolean({ description: "true: Anthropic's server-sent events, message_start to message_stop" })),
    metadata: Type.Optional(
      Type.Object(
        {
          user_id: Type.Optional(
            Type.Union([Type.String({ maxLength: 256 }), Type.Null()], { description: 'your end user, logged with the job' }),
          ),
        },
        { additionalProperties: true },
      ),
    ),
  },
  {
    additionalProperties: true,
    description:
      "Anthropic's Messages request. Accepted and ignored: temperature, top_p, top_k, stop_sequences, service_tier. Refused (400): client-defined tools (tools, tool_choice), non-text content blocks",
  },
)
export type MessagesRequest = Static<typeof MessagesRequest>

const Usage = Type.Object({ input_tokens: Type.Integer(), output_tokens: Type.Integer(), ats_charged: Type.Optional(AtsCharged) })

export const MessageAnswer = Type.Object({
  id: Type.String({ description: 'msg_<job id>' }),
  type: Type.Literal('message'),
  role: Type.Literal('assistant'),
  model: Type.String(),
  content: Type.Array(Type.Object({ type: Type.Literal('text'), text: Type.String() }), { description: 'one text block: the answer' }),
  stop_reason: Type.Union([Type.Literal('end_turn'), Type.Literal('pause_turn')], {
    description:
      'end_turn: the answer; pause_turn: the job waits for a person to approve a swap (the text says where; `ats` has the approval)',
  }),
  stop_sequence: Type.Null(),
  usage: Usage,
  agent: AgentTrace,
  ats: Type.Optional(JobAwaitingApproval),
})
export type MessageAnswer = Static<typeof MessageAnswer>

export const MessageStreamEvent = Type.Object(
  {
    type: Type.String({
      description:
        'message_start, content_block_start, ping, agent_step, content_block_delta, content_block_stop, message_delta, message_stop, or error',
    }),
    message: Type.Optional(Type.Unknown({ description: 'message_start: the message with empty content' })),
    index: Type.Optional(Type.Integer()),
    content_block: Type.Optional(Type.Object({ type: Type.Literal('text'), text: Type.String() })),
    delta: Type.Optional(
      Type.Unknown({ description: 'content_block_delta: {type: "text_delta", text}; message_delta: {stop_reason, stop_sequence}' }),
    ),
    usage: Type.Optional(Usage),
    step: Type.Optional(AgentStep.properties.step),
    agent: Type.Optional(AgentTrace),
    ats: Type.Optional(JobAwaitingApproval),
  },
  {
    description:
      "One server-sent event, `event: <type>` then `data: <json>`: message_start, content_block_start (index 0, text), ping, then one content_block_delta (text_delta) per piece of the answer as it comes, with agent_step events (one tool step of the agent: ours, which Anthropic clients skip as unknown) between them, then content_block_stop, message_delta (end_turn, usage, and the full `agent` trace), message_stop. A job that waits for a person to approve a swap ends the stream with message_delta stop_reason pause_turn (the text says where; `ats` has the approval). A failure after the start is an `error` event with Anthropic's error body",
  },
)

const errors = { 401: AnthropicError, 403: AnthropicError, 429: AnthropicError, 503: AnthropicError }

export const messagesRoutes = {
  messages: route({
    method: 'POST',
    url: '/v1/messages',
    summary:
      "Anthropic-compatible message: the conversation runs as an agent job of this key (GET /portfolio/jobs) and the answer comes back as a message, or streamed as Anthropic's events (stream: true). The key may come as x-api-key (Anthropic's SDKs) or Authorization: Bearer. The agent's tool calls are in the extra `agent` field. Closing the connection before the answer cancels the job",
    alsoProduces: { mediaType: 'text/event-stream', schema: MessageStreamEvent },
    schema: {
      body: MessagesRequest,
      response: { 200: MessageAnswer, 400: AnthropicError, 404: AnthropicError, 500: AnthropicError, 504: AnthropicError, ...errors },
    },
  }),
}
