// POST /v1/responses: OpenAI's Responses API over the agent's job pipeline. A response is a job
// of the API key (`resp_<job id>`), so it can be created in the background, retrieved and
// cancelled later, and continued with previous_response_id (the job's thread). Request, answer,
// stream events and errors are OpenAI's shapes, so the official SDKs work unmodified (docs/v1.md).
import { Type, type Static } from 'typebox'
import { StringEnum } from '../common/primitives.ts'
import { route } from '../common/route.ts'
import { AgentTrace, chatModels, OpenAiError, openAiRouteErrors } from './chat.ts'
import { AtsCharged, JobAwaitingApproval } from './http.ts'

export const responseStatuses = ['queued', 'in_progress', 'completed', 'failed', 'cancelled', 'incomplete'] as const
export type ResponseStatus = (typeof responseStatuses)[number]
export const responseInputRoles = ['user', 'assistant', 'system', 'developer'] as const

/** OpenAI's metadata: at most 16 pairs, keys up to 64 characters, values up to 512. */
const Metadata = Type.Record(Type.String(), Type.String({ maxLength: 512 }), {
  maxProperties: 16,
  propertyNames: { maxLength: 64 },
  description: 'your key-value pairs, stored with the response and sent back with it',
})

export const ResponseRequest = Type.Object(
  {
    model: Type.String({ minLength: 1, description: `one of ${chatModels.map((m) => m.id).join(', ')} (GET /v1/models)` }),
    // checked by the service rather than by a union schema, which would report every branch:
    // the service says which item is wrong and why
    input: Type.Unknown({
      description:
        'the prompt: a string, or message items ({role, content}, optionally type "message") oldest first, the last a user message; content is a string or input_text/output_text parts',
    }),
    instructions: Type.Optional(
      Type.Union([Type.String({ maxLength: 65_536 }), Type.Null()], { description: "a system message for the agent's model" }),
    ),
    previous_response_id: Type.Optional(
      Type.Union([Type.String({ minLength: 1, maxLength: 128 }), Type.Null()], {
        description: "a completed response of this key to continue: the new job goes into its job's thread, whose messages are the history",
      }),
    ),
    stream: Type.Optional(
      Type.Boolean({ description: 'true: server-sent response.* events, ending with response.completed (or response.failed)' }),
    ),
    background: Type.Optional(
      Type.Boolean({ description: 'true: answered at once (status queued) while the job runs; GET /v1/responses/:id to see it end' }),
    ),
    store: Type.Optional(Type.Boolean({ description: 'accepted; every response is a stored job, retrievable by id' })),
    metadata: Type.Optional(Type.Union([Metadata, Type.Null()])),
    user: Type.Optional(Type.String({ maxLength: 256, description: 'your end user, logged with the job' })),
  },
  {
    additionalProperties: true,
    description:
      "OpenAI's Responses request. Accepted and ignored: temperature, top_p, max_output_tokens, reasoning, truncation, parallel_tool_calls, include, service_tier, safety_identifier, prompt_cache_key. Refused (400): client tools, tool_choice other than auto or none, text.format other than text, input items other than messages (function_call_output…), non-text content parts, conversation, prompt",
  },
)
export type ResponseRequest = Static<typeof ResponseRequest>

const OutputText = Type.Object({ type: Type.Literal('output_text'), text: Type.String(), annotations: Type.Array(Type.Unknown()) })

export const ResponseMessage = Type.Object({
  type: Type.Literal('message'),
  id: Type.String({ description: 'msg_<job id>' }),
  status: Type.Union([Type.Literal('in_progress'), Type.Literal('completed')]),
  role: Type.Literal('assistant'),
  content: Type.Array(OutputText),
})

export const ResponseUsage = Type.Object({
  input_tokens: Type.Integer(),
  output_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  input_tokens_details: Type.Object({ cached_tokens: Type.Integer() }),
  output_tokens_details: Type.Object({ reasoning_tokens: Type.Integer() }),
  ats_charged: Type.Optional(AtsCharged),
})

export const ResponseObject = Type.Object(
  {
    id: Type.String({ description: 'resp_<job id>' }),
    object: Type.Literal('response'),
    created_at: Type.Integer({ description: 'seconds since the Unix epoch' }),
    completed_at: Type.Union([Type.Integer(), Type.Null()]),
    status: StringEnum(responseStatuses, {
      description: "the job's: pending is queued, running and awaiting_approval in_progress, complete completed",
    }),
    model: Type.String(),
    output: Type.Array(ResponseMessage, { description: 'the answer as one assistant message, once completed' }),
    usage: Type.Union([ResponseUsage, Type.Null()]),
    instructions: Type.Union([Type.String(), Type.Null()], {
      description: 'what the job was instructed: the instructions and any system or developer input messages',
    }),
    previous_response_id: Type.Union([Type.String(), Type.Null()]),
    metadata: Type.Record(Type.String(), Type.String()),
    error: Type.Union([Type.Object({ code: Type.String(), message: Type.String() }), Type.Null()]),
    incomplete_details: Type.Null(),
    background: Type.Boolean(),
    store: Type.Literal(true),
    parallel_tool_calls: Type.Literal(false),
    tool_choice: Type.Literal('auto'),
    tools: Type.Array(Type.Unknown(), { maxItems: 0 }),
    temperature: Type.Null(),
    top_p: Type.Null(),
    max_output_tokens: Type.Null(),
    text: Type.Object({ format: Type.Object({ type: Type.Literal('text') }) }),
    truncation: Type.Literal('disabled'),
    agent: Type.Optional(AgentTrace),
    ats: Type.Optional(JobAwaitingApproval),
  },
  { description: "OpenAI's Response object for a job; `agent` (once completed) holds the agent's own tool calls and transactions" },
)
export type ResponseObject = Static<typeof ResponseObject>

export const ResponseStreamEvent = Type.Object(
  {
    type: Type.String({
      description:
        'response.created, response.in_progress, response.output_item.added, response.content_part.added, response.output_text.delta…',
    }),
    sequence_number: Type.Integer({ description: 'from 0, one more per event' }),
  },
  {
    additionalProperties: true,
    description:
      "One server-sent event `event: <type>` with `data: {type, sequence_number, …}` in OpenAI's Responses sequence: response.created, response.in_progress, then the message (output_item.added, content_part.added, one output_text.delta per piece of text, output_text.done, content_part.done, output_item.done), then response.completed with the whole response; a job that fails or is cancelled ends with response.failed. Agent steps are not sent (OpenAI's SDKs reject unknown event types): they are in `agent` of the final response",
  },
)

const ResponseId = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128, description: 'resp_<job id>, or the job id' }) })

export const responsesRoutes = {
  createResponse: route({
    method: 'POST',
    url: '/v1/responses',
    summary:
      "OpenAI-compatible response: the input runs as an agent job of this key (GET /portfolio/jobs) and comes back as a Response, streamed as response.* events (stream: true), or at once with status queued (background: true). previous_response_id continues that response's thread. Closing the connection of a waiting or streamed response cancels the job",
    alsoProduces: { mediaType: 'text/event-stream', schema: ResponseStreamEvent },
    schema: {
      body: ResponseRequest,
      response: { 200: ResponseObject, 400: OpenAiError, 404: OpenAiError, 504: OpenAiError, ...openAiRouteErrors },
    },
  }),
  retrieveResponse: route({
    method: 'GET',
    url: '/v1/responses/:id',
    summary: 'A response of this key as it is now: queued, in_progress, or finished with its output',
    schema: {
      params: ResponseId,
      querystring: Type.Object(
        { stream: Type.Optional(Type.Boolean({ description: 'not supported (400): a stored response is retrieved as JSON' })) },
        { additionalProperties: true },
      ),
      response: { 200: ResponseObject, 400: OpenAiError, 404: OpenAiError, ...openAiRouteErrors },
    },
  }),
  cancelResponse: route({
    method: 'POST',
    url: '/v1/responses/:id/cancel',
    summary: 'Cancels a queued or in-progress response of this key (its job); a cancelled one is answered as it is, a finished one is 400',
    schema: { params: ResponseId, response: { 200: ResponseObject, 400: OpenAiError, 404: OpenAiError, ...openAiRouteErrors } },
  }),
}
