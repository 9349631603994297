// POST /v1/messages: Anthropic's Messages API over the agent's job pipeline. A message is a job
// of the API key, like a chat completion; the answer is written as Anthropic's message, or as its
// server-sent events. Errors are Anthropic's shape here (this plugin's own error handler), since
// Anthropic clients parse it; the plugin has its own prefix so that unknown paths under it are too.
import { anthropicErrorBody, messagesRoutes as routes, type JobResult, type MessageAnswer, type MessagesRequest } from '@ats/contracts'
import { installErrorHandler, publicFailure, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyError, FastifyInstance } from 'fastify'
import { invalidAt, ModelNotFound } from '../errors.ts'
import type { Answers } from '../answers/answers.ts'
import { failureOf, streamedStep, waitingField, waitingText } from '../answers/progress.ts'
import { checkModel, keyOwner, maxConversationChars, refuseTools, textOf, under, type Conversation } from '../answers/requests.ts'
import { conversationOf, jobFollowUp } from './chat.ts'

/** The job a request asks for: its messages read as a chat's (conversationOf), its system text the instructions. */
export function readMessages(body: MessagesRequest): Conversation {
  refuseTools(body, ['tools'])
  const system = textOf(body.system, 'system')
  if (system.length > maxConversationChars)
    throw invalidAt('system', `system is ${system.length} characters; at most ${maxConversationChars} are accepted`)
  // user and assistant messages only (the schema)
  return { ...conversationOf(body.messages, 'messages'), instructions: system.trim() ? system : undefined }
}

export async function messagesRoutes(app: FastifyInstance, { answers }: { answers: Answers }) {
  installErrorHandler(app, anthropicErrorBody)
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...under('/v1/messages', routes.messages),
    handler: async (request, reply) => {
      const owner = keyOwner(request)
      const body = request.body
      const stream = body.stream === true
      checkModel(body.model, ModelNotFound)
      const conversation = readMessages(body)
      const created = await answers.start(reply, owner, { ...conversation, model: body.model }, stream)
      const { jobId, threadId } = created
      request.log.info({ jobId, threadId, model: body.model, stream, user: body.metadata?.user_id ?? undefined }, 'message accepted')
      const usageOf = (result: JobResult) => {
        const { input, output, charged } = answers.usageOf(result)
        return { input_tokens: input, output_tokens: output, ...(charged === undefined ? {} : { ats_charged: charged }) }
      }
      const head = { id: `msg_${jobId}`, type: 'message' as const, role: 'assistant' as const, model: body.model }
      const noUsage = { input_tokens: 0, output_tokens: 0 }

      if (!stream) {
        const message = (text: string, stop: MessageAnswer['stop_reason'], rest: Pick<MessageAnswer, 'usage' | 'agent' | 'ats'>) => ({
          ...head,
          content: [{ type: 'text' as const, text }],
          stop_reason: stop,
          stop_sequence: null,
          ...rest,
        })
        const end = await answers.follow(reply, owner, jobId, created.seq)
        if (end === 'left') return reply
        if (end.status === 'awaiting_approval') {
          // answered at once, paused: a person decides, the job goes on (`ats` says what waits)
          const agent = await answers.traceSoFar(jobId, threadId)
          return message(waitingText(end, jobFollowUp(jobId)), 'pause_turn', { usage: noUsage, agent, ats: waitingField(jobId, end) })
        }
        if (end.status !== 'complete') {
          // the same request would fail the same way: Anthropic clients obey x-should-retry
          reply.header('x-should-retry', 'false')
          throw failureOf(end)
        }
        answers.charged(reply, end.result)
        const agent = await answers.traceOf(jobId, threadId, end.result)
        return message(end.result.text, 'end_turn', { usage: usageOf(end.result), agent })
      }

      const raw = answers.openStream(reply)
      const send = (type: string, data: Record<string, unknown>) =>
        raw.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
      send('message_start', { message: { ...head, content: [], stop_reason: null, stop_sequence: null, usage: noUsage } })
      send('content_block_start', { index: 0, content_block: { type: 'text', text: '' } })
      send('ping', {})
      try {
        const end = await answers.follow(reply, owner, jobId, created.seq, {
          onStep: (step) => send('agent_step', streamedStep(jobId, step)),
          onText: (text) => send('content_block_delta', { index: 0, delta: { type: 'text_delta', text } }),
        })
        if (end === 'left') return reply
        if (end.status === 'awaiting_approval') {
          send('content_block_delta', { index: 0, delta: { type: 'text_delta', text: waitingText(end, jobFollowUp(jobId)) } })
          send('content_block_stop', { index: 0 })
          const agent = await answers.traceSoFar(jobId, threadId)
          send('message_delta', {
            delta: { stop_reason: 'pause_turn', stop_sequence: null },
            usage: noUsage,
            agent,
            ats: waitingField(jobId, end),
          })
          send('message_stop', {})
          return reply
        }
        // written as any failure is, below
        if (end.status !== 'complete') throw failureOf(end)
        send('content_block_stop', { index: 0 })
        const agent = await answers.traceOf(jobId, threadId, end.result)
        send('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: usageOf(end.result), agent })
        send('message_stop', {})
      } catch (error) {
        // the headers are sent: the failure goes into the stream, in Anthropic's shape
        const { internal, ...failure } = publicFailure(error as FastifyError)
        if (internal) request.log.error({ err: error, jobId }, 'message stream failed')
        send('error', anthropicErrorBody(failure))
      } finally {
        raw.end()
      }
      return reply
    },
  })
}
