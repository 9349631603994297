// The /v1 group: OpenAI's chat-completions API over the agent's job pipeline. A completion is a
// job of the API key (owner: the key id), so it shows in GET /portfolio/jobs; the answer is the
// job's result as a chat.completion, or its events as chat.completion.chunk server-sent events.
// Errors are OpenAI's shape here (the plugin's own error handler), since OpenAI clients parse it.
import {
  chatModels,
  chatModelsCreated,
  chatRoutes,
  maxPromptLength,
  openAiErrorBody,
  type AgentToolCall,
  type AgentTrace,
  type ApiRoute,
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatCompletionRequest,
  type JobEvent,
  type JobResult,
} from '@ats/contracts'
import { installErrorHandler, publicFailure, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { atParam, ChatInterrupted, ChatTimedOut, InvalidChat, JobFailed, ModelNotFound, NoKey, UnknownModel } from '../errors.ts'
import type { JobEvents } from '../jobs/events.ts'
import type { JobQueue } from '../jobs/queue.ts'
import type { JobStore, Owner } from '../jobs/store.ts'
import type { ToolOutput } from '../runner/tools.ts'

export interface ChatRouteDeps {
  store: JobStore
  queue: JobQueue
  events: JobEvents
  /** broadcast that a job was cancelled, for the worker running it */
  cancelled(jobId: string): void
  /** how long a completion waits for its job before it is cancelled (504) */
  waitMs: number
}

/** The whole conversation's text, at most: a runner reads only the recent part anyway. */
const maxConversationChars = 65_536

/** The owner of /v1 jobs: the API key (the gateway forwards its id and bound wallet). */
function keyOwner(request: FastifyRequest): Owner {
  const { keyId, wallet } = request.identity
  if (!keyId) throw new NoKey()
  return { ownerId: keyId, keyId, wallet }
}

const modelIds = chatModels.map((m) => m.id).join(', ')
const modelView = (m: (typeof chatModels)[number]) => ({
  id: m.id,
  object: 'model' as const,
  created: chatModelsCreated,
  owned_by: 'agent-trading-service',
  description: m.description,
})

export interface Conversation {
  prompt: string
  history: Array<{ role: 'user' | 'assistant'; content: string }>
  instructions: string | undefined
}

/** The text of a message's content: a string, or its text parts joined; other parts are refused. */
function textOf(content: unknown, at: string): string {
  if (content === undefined || content === null) return ''
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) throw atParam(`${at}.content`, new InvalidChat(`${at}.content must be a string or an array of text parts`))
  return content
    .map((part: unknown, j) => {
      const { type, text } = (part && typeof part === 'object' ? part : {}) as { type?: unknown; text?: unknown }
      if (type !== 'text' || typeof text !== 'string') {
        const what = typeof type === 'string' ? `a ${type} part` : 'not a {type, text} part'
        throw atParam(`${at}.content[${j}]`, new InvalidChat(`${at}.content[${j}] is ${what}: only text parts ({type: "text", text}) are supported`))
      }
      return text
    })
    .join('\n')
}

/**
 * The job a request asks for: the last message is the prompt (a user's), the earlier user and
 * assistant messages its history, system and developer messages the instructions.
 */
export function readConversation(body: ChatCompletionRequest): Conversation {
  const extra = body as Record<string, unknown>
  for (const field of ['tools', 'functions'] as const) {
    const value = extra[field]
    if (Array.isArray(value) ? value.length > 0 : value !== undefined && value !== null) {
      throw atParam(field, new InvalidChat(`${field} is not supported: the agent runs its own tools and shows them in the answer's "agent" field`))
    }
  }
  const format = (extra.response_format as { type?: unknown } | undefined)?.type
  if (format !== undefined && format !== 'text') {
    throw atParam('response_format', new InvalidChat(`response_format ${String(format)} is not supported: the agent answers in text`))
  }

  const instructions: string[] = []
  const history: Conversation['history'] = []
  let total = 0
  body.messages.forEach((message, i) => {
    const at = `messages[${i}]`
    if (message.role === 'tool') {
      throw atParam(`${at}.role`, new InvalidChat(`${at}: tool messages are not supported: the agent runs its own tools (client-defined tools are not accepted)`))
    }
    const text = textOf(message.content, at)
    total += text.length
    if (message.role === 'system' || message.role === 'developer') {
      if (text.trim()) instructions.push(text)
      return
    }
    if (message.role === 'user' && !text.trim()) throw atParam(`${at}.content`, new InvalidChat(`${at}.content is empty: a user message needs text`))
    if (text.trim()) history.push({ role: message.role, content: text })
  })
  if (total > maxConversationChars) throw atParam('messages', new InvalidChat(`the conversation is ${total} characters; at most ${maxConversationChars} are accepted`))
  const last = body.messages.length - 1
  if (body.messages[last]!.role !== 'user') {
    throw atParam(`messages[${last}].role`, new InvalidChat(`the last message must be a user message (the prompt); it is a ${body.messages[last]!.role} message`))
  }
  const prompt = history.pop()!.content
  if (prompt.length > maxPromptLength) {
    throw atParam(`messages[${last}].content`, new InvalidChat(`messages[${last}].content is ${prompt.length} characters; a prompt is at most ${maxPromptLength}`))
  }
  return { prompt, history, instructions: instructions.length > 0 ? instructions.join('\n\n') : undefined }
}

/** The answer's text in pieces, each a word with the space after it: joined, they are the text. */
export const piecesOf = (text: string): string[] => text.match(/\S+\s*|\s+/g) ?? []

type Terminal = { status: 'complete'; result: JobResult } | { status: 'failed'; error: string } | { status: 'cancelled' }
const terminalOf = (e: JobEvent): Terminal | undefined => {
  if (e.type !== 'status') return undefined
  const data = e.data as { status: string; result?: JobResult; error?: string }
  if (data.status === 'complete') return { status: 'complete', result: data.result! }
  if (data.status === 'failed') return { status: 'failed', error: data.error ?? 'the job failed' }
  if (data.status === 'cancelled') return { status: 'cancelled' }
  return undefined
}

const failureOf = (end: Exclude<Terminal, { status: 'complete' }>) =>
  new JobFailed(end.status === 'failed' ? `the agent could not answer: ${end.error}` : 'the job was cancelled before it answered')

export async function chatRoutesPlugin(app: FastifyInstance, { store, queue, events, cancelled, waitMs }: ChatRouteDeps) {
  installErrorHandler(app, openAiErrorBody)
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  // the plugin is registered under the /v1 prefix
  const local = <R extends ApiRoute>(r: R): R => ({ ...r, url: r.url.slice('/v1'.length) })

  async function cancelJob(owner: Owner, jobId: string) {
    const event = await store.cancel(owner, jobId)
    if (!event) return
    events.emit(event)
    cancelled(jobId)
  }

  async function traceOf(jobId: string, threadId: string, result: JobResult): Promise<AgentTrace> {
    const steps = (await store.stepsOf(jobId)).filter((s) => s.step <= result.toolCalls.length)
    const toolCalls = steps.map(
      (s): AgentToolCall => ({
        id: `call_${jobId}_${s.step}`,
        type: 'function',
        function: { name: s.tool, arguments: JSON.stringify(s.input ?? {}) },
        ...(s.error === null ? { status: 'ok', output: (s.output as unknown as ToolOutput | null)?.output } : { status: 'error', error: s.error }),
      }),
    )
    return { jobId, threadId, steps: result.steps, tool_calls: toolCalls, transactions: result.transactions }
  }

  const usageOf = (result: JobResult) => {
    const { promptTokens = 0, completionTokens = 0 } = result.usage ?? {}
    return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens }
  }

  /**
   * Follows the job until it ends, the client leaves (the job is cancelled), the wait runs out
   * (cancelled, 504) or the service stops (cancelled, 503). `onStep` gets each tool step.
   */
  async function follow(reply: FastifyReply, owner: Owner, jobId: string, afterSeq: number, onStep: (e: JobEvent) => void) {
    let end: Terminal | undefined
    const following = events.watch(jobId, afterSeq, false, (e) => {
      if (e.type === 'step') onStep(e)
      end ??= terminalOf(e)
    })
    let left = false
    const leave = () => {
      if (reply.raw.writableEnded) return
      left = true
      following.stop()
    }
    reply.raw.on('close', leave)
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      following.stop()
    }, waitMs)
    await following.ended
    clearTimeout(timer)
    reply.raw.off('close', leave)
    if (end) return end
    await cancelJob(owner, jobId)
    if (left) {
      reply.request.log.info({ jobId }, 'chat client left: job cancelled')
      return 'left' as const
    }
    throw timedOut ? new ChatTimedOut(Math.round(waitMs / 1000)) : new ChatInterrupted()
  }

  api.route({
    ...local(chatRoutes.models),
    handler: async (request) => {
      keyOwner(request)
      return { object: 'list' as const, data: chatModels.map(modelView) }
    },
  })

  api.route({
    ...local(chatRoutes.model),
    handler: async (request) => {
      keyOwner(request)
      const model = chatModels.find((m) => m.id === request.params.model)
      if (!model) throw atParam('model', new UnknownModel(request.params.model, modelIds))
      return modelView(model)
    },
  })

  api.route({
    ...local(chatRoutes.completions),
    handler: async (request, reply) => {
      const owner = keyOwner(request)
      const body = request.body
      if (!chatModels.some((m) => m.id === body.model)) throw atParam('model', new ModelNotFound(body.model, modelIds))
      const conversation = readConversation(body)
      // a stream holds a connection for the whole job: capped per key, before the job is created
      if (body.stream === true) events.takeStreamSlot(owner.ownerId, reply.raw)
      const created = await store.createPrompt(owner, { ...conversation, model: body.model })
      events.emit(created.event)
      await queue.enqueue(created.jobId)
      const { jobId, threadId } = created
      request.log.info({ jobId, threadId, model: body.model, stream: body.stream === true, user: body.user }, 'chat completion accepted')
      const head = <O extends string>(object: O) => ({
        id: `chatcmpl-${jobId}`,
        object,
        created: Math.floor(created.event.at / 1000),
        model: body.model,
        system_fingerprint: null,
      })

      if (body.stream !== true) {
        const end = await follow(reply, owner, jobId, created.event.seq, () => {})
        if (end === 'left') return reply
        if (end.status !== 'complete') {
          // the same request would fail the same way: OpenAI clients obey x-should-retry
          reply.header('x-should-retry', 'false')
          throw failureOf(end)
        }
        const completion: ChatCompletion = {
          ...head('chat.completion' as const),
          choices: [
            { index: 0, message: { role: 'assistant', content: end.result.text, refusal: null, annotations: [] }, logprobs: null, finish_reason: 'stop' },
          ],
          usage: usageOf(end.result),
          agent: await traceOf(jobId, threadId, end.result),
        }
        return completion
      }

      const raw = events.openStream(reply)
      const chunk = (fields: Partial<ChatCompletionChunk> & { delta?: ChatCompletionChunk['choices'][number]['delta']; finish?: 'stop' }) => {
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
        const end = await follow(reply, owner, jobId, created.event.seq, (e) => {
          const step = e.data as { step: number; tool: string; phase: 'started' | 'finished' | 'failed'; input?: unknown; error?: string }
          chunk({
            delta: {},
            ...usageNull,
            agent: {
              jobId,
              step: {
                step: step.step,
                tool: step.tool,
                phase: step.phase,
                ...(step.input === undefined ? {} : { arguments: JSON.stringify(step.input) }),
                ...(step.error === undefined ? {} : { error: step.error }),
              },
            },
          })
        })
        if (end === 'left') return reply
        if (end.status !== 'complete') {
          const { internal: _, ...failure } = publicFailure(failureOf(end))
          raw.write(`data: ${JSON.stringify(openAiErrorBody(failure))}\n\n`)
          return reply
        }
        for (const piece of piecesOf(end.result.text)) chunk({ delta: { content: piece }, ...usageNull })
        chunk({ delta: {}, finish: 'stop', ...usageNull, agent: await traceOf(jobId, threadId, end.result) })
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
