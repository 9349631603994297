// The /v1 group: OpenAI's chat-completions API over the agent's job pipeline. A completion is a
// job of the API key (owner: the key id), so it shows in GET /portfolio/jobs; the answer is the
// job's result as a chat.completion, or its events as chat.completion.chunk server-sent events.
// Errors are OpenAI's shape here (the plugin's own error handler), since OpenAI clients parse it.
import {
  chatModels,
  chatModelsCreated,
  chatRoutes as routes,
  maxPromptLength,
  openAiErrorBody,
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatCompletionRequest,
  type JobResult,
} from '@ats/contracts'
import { installErrorHandler, publicFailure, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyError, FastifyInstance } from 'fastify'
import { atParam, invalidAt, ModelNotFound } from '../errors.ts'
import type { Answers } from '../answers/answers.ts'
import { failureOf, streamedStep, waitingField, waitingText } from '../answers/progress.ts'
import { checkModel, keyOwner, maxConversationChars, modelIds, refuseTools, textOf, under, type Conversation } from '../answers/requests.ts'

/** Where the answer of a chat job that waits for approval will be. */
export const jobFollowUp = (jobId: string) => `job ${jobId}, in GET /portfolio/jobs`

const modelView = (m: (typeof chatModels)[number]) => ({
  id: m.id,
  object: 'model' as const,
  created: chatModelsCreated,
  owned_by: 'agent-trading-service',
  description: m.description,
})

/** The job a request asks for: its messages (conversationOf); client tools and formats other than text are refused. */
export function readConversation(body: ChatCompletionRequest): Conversation {
  refuseTools(body, ['tools', 'functions'])
  const format = ((body as Record<string, unknown>).response_format as { type?: unknown } | undefined)?.type
  if (format !== undefined && format !== 'text')
    throw invalidAt('response_format', `response_format ${String(format)} is not supported: the agent answers in text`)
  return conversationOf(body.messages, 'messages')
}

/**
 * Messages (the request's `field`) as a job: the last one is the prompt (a user's), the earlier
 * user and assistant messages its history, system and developer messages the instructions.
 */
export function conversationOf(
  messages: ReadonlyArray<{ role: string; content?: unknown }>,
  field: string,
  partTypes?: readonly string[],
): Conversation {
  const instructions: string[] = []
  const history: Conversation['history'] = []
  let total = 0
  messages.forEach((message, i) => {
    const at = `${field}[${i}]`
    if (message.role === 'tool')
      throw invalidAt(
        `${at}.role`,
        `${at}: tool messages are not supported: the agent runs its own tools (client-defined tools are not accepted)`,
      )
    const text = textOf(message.content, `${at}.content`, partTypes)
    total += text.length
    if (message.role === 'system' || message.role === 'developer') {
      if (text.trim()) instructions.push(text)
      return
    }
    if (message.role === 'user' && !text.trim()) throw invalidAt(`${at}.content`, `${at}.content is empty: a user message needs text`)
    if (text.trim()) history.push({ role: message.role as 'user' | 'assistant', content: text })
  })
  if (total > maxConversationChars)
    throw invalidAt(field, `the conversation is ${total} characters; at most ${maxConversationChars} are accepted`)
  const last = messages.length - 1
  const at = `${field}[${last}]`
  if (messages[last]!.role !== 'user')
    throw invalidAt(`${at}.role`, `the last message must be a user message (the prompt); it is a ${messages[last]!.role} message`)
  const prompt = history.pop()!.content
  if (prompt.length > maxPromptLength)
    throw invalidAt(`${at}.content`, `${at}.content is ${prompt.length} characters; a prompt is at most ${maxPromptLength}`)
  return { prompt, history, instructions: instructions.length > 0 ? instructions.join('\n\n') : undefined }
}

export async function chatRoutes(app: FastifyInstance, { answers }: { answers: Answers }) {
  installErrorHandler(app, openAiErrorBody)
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...under('/v1', routes.models),
    handler: async (request) => {
      keyOwner(request)
      return { object: 'list' as const, data: chatModels.map(modelView) }
    },
  })

  api.route({
    ...under('/v1', routes.model),
    handler: async (request) => {
      keyOwner(request)
      const model = chatModels.find((m) => m.id === request.params.model)
      if (!model) throw atParam('model', new ModelNotFound(request.params.model, modelIds))
      return modelView(model)
    },
  })

  api.route({
    ...under('/v1', routes.completions),
    handler: async (request, reply) => {
      const owner = keyOwner(request)
      const body = request.body
      checkModel(body.model)
      const conversation = readConversation(body)
      // a stream holds a connection for the whole job: capped per key, before the job is created
      const created = await answers.start(reply, owner, { ...conversation, model: body.model }, body.stream === true)
      const { jobId, threadId } = created
      request.log.info({ jobId, threadId, model: body.model, stream: body.stream === true, user: body.user }, 'chat completion accepted')
      const head = <O extends string>(object: O) => ({
        id: `chatcmpl-${jobId}`,
        object,
        created: Math.floor(created.at / 1000),
        model: body.model,
        system_fingerprint: null,
      })
      const usageOf = (result: JobResult) => {
        const { input, output, charged } = answers.usageOf(result)
        return {
          prompt_tokens: input,
          completion_tokens: output,
          total_tokens: input + output,
          ...(charged === undefined ? {} : { ats_charged: charged }),
        }
      }

      const noUsage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }

      if (body.stream !== true) {
        const completion = (content: string, rest: Pick<ChatCompletion, 'usage' | 'agent' | 'ats'>): ChatCompletion => ({
          ...head('chat.completion' as const),
          choices: [
            { index: 0, message: { role: 'assistant', content, refusal: null, annotations: [] }, logprobs: null, finish_reason: 'stop' },
          ],
          ...rest,
        })
        const end = await answers.follow(reply, owner, jobId, created.seq)
        if (end === 'left') return reply
        if (end.status === 'awaiting_approval') {
          // answered at once: a person decides, the job goes on (`ats` says what waits)
          const agent = await answers.traceSoFar(jobId, threadId)
          return completion(waitingText(end, jobFollowUp(jobId)), { usage: noUsage, agent, ats: waitingField(jobId, end) })
        }
        if (end.status !== 'complete') {
          // the same request would fail the same way: OpenAI clients obey x-should-retry
          reply.header('x-should-retry', 'false')
          throw failureOf(end)
        }
        answers.charged(reply, end.result)
        return completion(end.result.text, { usage: usageOf(end.result), agent: await answers.traceOf(jobId, threadId, end.result) })
      }

      const raw = answers.openStream(reply)
      const chunk = (
        fields: Partial<ChatCompletionChunk> & { delta?: ChatCompletionChunk['choices'][number]['delta']; finish?: 'stop' },
      ) => {
        const { delta, finish, ...rest } = fields
        const body: ChatCompletionChunk = {
          ...head('chat.completion.chunk' as const),
          choices: delta ? [{ index: 0, delta, logprobs: null, finish_reason: finish ?? null }] : [],
          ...rest,
        }
        raw.write(`data: ${JSON.stringify(body)}\n\n`)
      }
      const withUsage = body.stream_options?.include_usage === true
      const usageNull = withUsage ? { usage: null } : {}
      chunk({ delta: { role: 'assistant', content: '' }, ...usageNull })
      try {
        const end = await answers.follow(reply, owner, jobId, created.seq, {
          onStep: (step) => chunk({ delta: {}, ...usageNull, agent: streamedStep(jobId, step) }),
          onText: (text) => chunk({ delta: { content: text }, ...usageNull }),
        })
        if (end === 'left') return reply
        if (end.status === 'awaiting_approval') {
          chunk({ delta: { content: waitingText(end, jobFollowUp(jobId)) }, ...usageNull })
          chunk({
            delta: {},
            finish: 'stop',
            ...usageNull,
            agent: await answers.traceSoFar(jobId, threadId),
            ats: waitingField(jobId, end),
          })
          if (withUsage) chunk({ usage: noUsage })
          raw.write('data: [DONE]\n\n')
          return reply
        }
        // written as any failure is, below
        if (end.status !== 'complete') throw failureOf(end)
        // paid by credit: the finish chunk says what it cost, whether or not usage was asked for
        const finishUsage = end.result.charged === undefined ? usageNull : { usage: usageOf(end.result) }
        chunk({ delta: {}, finish: 'stop', ...finishUsage, agent: await answers.traceOf(jobId, threadId, end.result) })
        if (withUsage) chunk({ usage: usageOf(end.result) })
        raw.write('data: [DONE]\n\n')
      } catch (error) {
        // the headers are sent: the failure goes into the stream, in OpenAI's shape
        const { internal, ...failure } = publicFailure(error as FastifyError)
        if (internal) request.log.error({ err: error, jobId }, 'chat stream failed')
        raw.write(`data: ${JSON.stringify(openAiErrorBody(failure))}\n\n`)
      } finally {
        raw.end()
      }
      return reply
    },
  })
}
