// POST /v1/responses: OpenAI's Responses API over the agent's job pipeline. A response is a job of
// the API key, `resp_<job id>`: waited for, streamed as response.* events, or left to run in the
// background and retrieved or cancelled by id; previous_response_id continues that job's thread.
// Errors are OpenAI's shape here (the plugin's own error handler), since OpenAI clients parse it.
import {
  maxChatMessages,
  maxPromptLength,
  openAiErrorBody,
  responseInputRoles,
  responsesRoutes as routes,
  type Approval,
  type JobResult,
  type ResponseObject,
  type ResponseRequest,
  type ResponseStatus,
} from '@ats/contracts'
import { installErrorHandler, publicFailure, type TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyError, FastifyInstance } from 'fastify'
import { invalidAt, ResponseNotFound } from '../errors.ts'
import type { Job } from '../generated/prisma/client.ts'
import type { Owner } from '../jobs/store.ts'
import type { Answers } from '../answers/answers.ts'
import { failureOf, waitingField, waitingText, type Waiting } from '../answers/progress.ts'
import { checkModel, keyOwner, refuseTools, under, type Conversation } from '../answers/requests.ts'
import { conversationOf } from './chat.ts'

const jobIdOf = (responseId: string) => (responseId.startsWith('resp_') ? responseId.slice('resp_'.length) : responseId)

const statusOf: Record<Job['status'], ResponseStatus> = {
  pending: 'queued',
  running: 'in_progress',
  awaiting_approval: 'in_progress',
  complete: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
}

/** What a response keeps of its request, to answer it the same way when retrieved (stored with the job's prompt). */
interface Kept {
  previous_response_id: string | null
  metadata: Record<string, string>
  background: boolean
}

/** An error as a response's `error`: OpenAI's code and the message the client may see. */
function errorOf(error: FastifyError) {
  const { internal: _, ...failure } = publicFailure(error)
  const { code, message } = openAiErrorBody(failure).error
  return { code: code ?? 'server_error', message }
}

/** The most messages a runner reads of a thread (AGENT_HISTORY_MESSAGES' maximum): what a branch copies. */
const maxBranchMessages = 200

/** The request's input as a job; OpenAI features the agent does not have are refused, naming the field. */
export function readInput(body: ResponseRequest): Conversation {
  const extra = body as Record<string, unknown>
  refuseTools(body, ['tools'], 'response')
  if (extra.tool_choice != null && extra.tool_choice !== 'auto' && extra.tool_choice !== 'none') {
    throw invalidAt('tool_choice', 'tool_choice must be auto or none: the agent chooses its own tools')
  }
  const format = (extra.text as { format?: { type?: unknown } } | undefined)?.format?.type
  if (format !== undefined && format !== 'text')
    throw invalidAt('text.format', `text.format ${String(format)} is not supported: the agent answers in text`)
  for (const field of ['conversation', 'prompt'] as const) {
    if (extra[field] != null) throw invalidAt(field, `${field} is not supported: continue a conversation with previous_response_id`)
  }
  const instructions = body.instructions?.trim() ? body.instructions : undefined

  const { input } = body
  if (typeof input === 'string') {
    if (!input.trim()) throw invalidAt('input', 'input is empty: it needs the prompt')
    if (input.length > maxPromptLength)
      throw invalidAt('input', `input is ${input.length} characters; a prompt is at most ${maxPromptLength}`)
    return { prompt: input, history: [], instructions }
  }
  if (!Array.isArray(input)) throw invalidAt('input', 'input must be a string or an array of message items')
  if (input.length === 0) throw invalidAt('input', 'input is empty: it needs at least one user message')
  if (input.length > maxChatMessages) throw invalidAt('input', `input has ${input.length} items; at most ${maxChatMessages} are accepted`)
  const messages = input.map((item: unknown, i) => {
    const { type, role, content } = (item && typeof item === 'object' ? item : {}) as { type?: unknown; role?: unknown; content?: unknown }
    if (type !== undefined && type !== 'message') {
      throw invalidAt(
        `input[${i}].type`,
        `input[${i}] is a ${String(type)} item: only message items ({role, content}) are supported, since the agent runs its own tools`,
      )
    }
    if (!responseInputRoles.includes(role as (typeof responseInputRoles)[number])) {
      throw invalidAt(`input[${i}].role`, `input[${i}].role must be one of ${responseInputRoles.join(', ')}`)
    }
    return { role: role as string, content }
  })
  const conversation = conversationOf(messages, 'input', ['input_text', 'output_text'])
  const joined = [instructions, conversation.instructions].filter((text) => text !== undefined).join('\n\n')
  return { ...conversation, instructions: joined || undefined }
}

export async function responsesRoutes(app: FastifyInstance, { answers }: { answers: Answers }) {
  installErrorHandler(app, openAiErrorBody)
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  const { store } = answers

  /**
   * Where a follow-up of `previousId` goes: that job's thread when its answer is the thread's
   * last message; else (a branch from an earlier response) a new thread with the messages up to it.
   */
  async function continuation(owner: Owner, previousId: string) {
    const previous = await store.getJob(owner, jobIdOf(previousId))
    if (!previous) throw invalidAt('previous_response_id', `previous_response_id: no response ${previousId} of this API key`)
    if (previous.status !== 'complete') {
      const why = `previous_response_id: ${previousId} is ${statusOf[previous.status]}; only a completed response can be continued`
      throw invalidAt('previous_response_id', why)
    }
    const id = `resp_${previous.id}`
    const thread = (await store.thread(owner, previous.threadId))!
    const answer = thread.messages.map((m) => (m.role === 'assistant' ? m.metadata.jobId : undefined)).lastIndexOf(previous.id)
    if (answer === thread.messages.length - 1) return { id, threadId: previous.threadId, history: [] }
    const history = thread.messages
      .slice(0, answer + 1)
      .slice(-maxBranchMessages)
      .map((m) => ({ role: m.role, content: m.content }))
    return { id, threadId: undefined, history }
  }

  const keptOf = (raw: Record<string, unknown> | null): Kept => ({
    previous_response_id: typeof raw?.previous_response_id === 'string' ? raw.previous_response_id : null,
    metadata: (raw?.metadata ?? {}) as Record<string, string>,
    background: raw?.background === true,
  })

  interface View {
    jobId: string
    threadId: string
    createdAt: number
    model: string
    status: ResponseStatus
    instructions: string | null
    kept: Kept
    /** once complete */
    done?: { result: JobResult; at: number }
    /** while a swap of it waits for a person's approval: the answer says so, and where to decide */
    waiting?: Waiting | undefined
    error?: { code: string; message: string } | null
  }

  /** The message of a response: the answer once completed; what waits while a swap waits for approval. */
  const outputOf = (jobId: string, done: View['done'], waiting: View['waiting']): ResponseObject['output'] => {
    const message = (status: 'completed' | 'in_progress', text: string) => ({
      type: 'message' as const,
      id: `msg_${jobId}`,
      status,
      role: 'assistant' as const,
      content: [{ type: 'output_text' as const, text, annotations: [] }],
    })
    if (done) return [message('completed', done.result.text)]
    if (waiting) return [message('in_progress', waitingText(waiting, `GET /v1/responses/resp_${jobId}`))]
    return []
  }

  async function responseOf(view: View): Promise<ResponseObject> {
    const { jobId, threadId, done, waiting } = view
    const usage = done && answers.usageOf(done.result)
    return {
      id: `resp_${jobId}`,
      object: 'response',
      created_at: Math.floor(view.createdAt / 1000),
      completed_at: done ? Math.floor(done.at / 1000) : null,
      status: view.status,
      model: view.model,
      output: outputOf(jobId, done, waiting),
      usage: usage
        ? {
            input_tokens: usage.input,
            output_tokens: usage.output,
            total_tokens: usage.input + usage.output,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens_details: { reasoning_tokens: 0 },
            ...(usage.charged === undefined ? {} : { ats_charged: usage.charged }),
          }
        : null,
      instructions: view.instructions,
      ...view.kept,
      error: view.error ?? null,
      incomplete_details: null,
      store: true,
      parallel_tool_calls: false,
      tool_choice: 'auto',
      tools: [],
      temperature: null,
      top_p: null,
      max_output_tokens: null,
      text: { format: { type: 'text' } },
      truncation: 'disabled',
      ...(done ? { agent: await answers.traceOf(jobId, threadId, done.result) } : {}),
      ...(waiting ? { agent: await answers.traceSoFar(jobId, threadId), ats: waitingField(jobId, waiting) } : {}),
    }
  }

  /** A job as a response, as it is now. */
  async function responseOfJob(job: Job, kept?: Kept) {
    const result = job.status === 'complete' ? (job.result as unknown as JobResult) : undefined
    const waiting: Waiting | undefined =
      job.status === 'awaiting_approval' && job.approval
        ? { status: 'awaiting_approval', approval: job.approval as unknown as Approval, notice: job.approvalNotice ?? '' }
        : undefined
    return responseOf({
      jobId: job.id,
      threadId: job.threadId,
      createdAt: job.createdAt.getTime(),
      model: job.model ?? 'ats-agent',
      status: statusOf[job.status],
      instructions: job.instructions,
      kept: kept ?? keptOf(await store.apiRequestOf(job)),
      ...(result ? { done: { result, at: job.updatedAt.getTime() } } : {}),
      waiting,
      error: job.status === 'failed' ? errorOf(failureOf({ status: 'failed', error: job.error ?? 'the job failed' })) : null,
    })
  }

  const jobOf = async (owner: Owner, id: string) => {
    const job = await store.getJob(owner, jobIdOf(id))
    if (!job) throw new ResponseNotFound(id)
    return job
  }

  api.route({
    ...under('/v1/responses', routes.createResponse),
    handler: async (request, reply) => {
      const owner = keyOwner(request)
      const { body } = request
      checkModel(body.model)
      const stream = body.stream === true
      const background = body.background === true
      if (stream && background) {
        const why = 'stream with background is not supported: create it in the background, then GET /v1/responses/{id} until it ends'
        throw invalidAt('stream', why)
      }
      const conversation = readInput(body)
      const previous = body.previous_response_id ? await continuation(owner, body.previous_response_id) : undefined
      const kept: Kept = { previous_response_id: previous?.id ?? null, metadata: body.metadata ?? {}, background }
      const created = await answers.start(
        reply,
        owner,
        {
          ...conversation,
          history: [...(previous?.history ?? []), ...conversation.history],
          model: body.model,
          threadId: previous?.threadId,
          apiRequest: { ...kept },
        },
        stream,
      )
      const { jobId, threadId } = created
      request.log.info({ jobId, threadId, model: body.model, stream, background, user: body.user }, 'response accepted')
      const pending: View = {
        jobId,
        threadId,
        createdAt: created.at,
        model: body.model,
        status: 'queued',
        instructions: conversation.instructions ?? null,
        kept,
      }
      if (background) return responseOf(pending)

      const ended = async () => responseOfJob((await store.getJob(owner, jobId))!, kept)
      if (!stream) {
        const end = await answers.follow(reply, owner, jobId, created.seq)
        if (end === 'left') return reply
        // a swap waits for a person: in_progress at once, saying what waits and where (GET it later for the answer)
        if (end.status === 'awaiting_approval') return responseOf({ ...pending, status: 'in_progress', waiting: end })
        if (end.status === 'complete') answers.charged(reply, end.result)
        return ended()
      }

      const raw = answers.openStream(reply)
      let sequence = 0
      const send = (type: string, fields: Record<string, unknown>) =>
        raw.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...fields })}\n\n`)
      const started = await responseOf({ ...pending, status: 'in_progress' })
      send('response.created', { response: started })
      send('response.in_progress', { response: started })
      const at = { item_id: `msg_${jobId}`, output_index: 0, content_index: 0 }
      let opened = false
      const open = () => {
        if (opened) return
        opened = true
        send('response.output_item.added', {
          output_index: 0,
          item: { type: 'message', id: at.item_id, status: 'in_progress', role: 'assistant', content: [] },
        })
        send('response.content_part.added', { ...at, part: { type: 'output_text', text: '', annotations: [] } })
      }
      /** the end of the response's message, as `response` has it */
      const closeOutput = (response: ResponseObject) => {
        const part = response.output[0]!.content[0]!
        send('response.output_text.done', { ...at, text: part.text, logprobs: [] })
        send('response.content_part.done', { ...at, part })
        send('response.output_item.done', { output_index: 0, item: response.output[0] })
      }
      try {
        // agent steps are not sent: OpenAI's SDKs reject event types they do not know
        const end = await answers.follow(reply, owner, jobId, created.seq, {
          onText: (delta) => {
            open()
            send('response.output_text.delta', { ...at, delta, logprobs: [] })
          },
        })
        if (end === 'left') return reply
        if (end.status === 'awaiting_approval') {
          // the notice as the text, then the stream ends in progress: GET /v1/responses/{id} later has the answer
          const response = await responseOf({ ...pending, status: 'in_progress', waiting: end })
          open()
          send('response.output_text.delta', { ...at, delta: response.output[0]!.content[0]!.text, logprobs: [] })
          closeOutput(response)
          send('response.in_progress', { response })
          return reply
        }
        const response = await ended()
        if (end.status !== 'complete') {
          send('response.failed', { response })
          return reply
        }
        open()
        closeOutput(response)
        send('response.completed', { response })
      } catch (error) {
        // the headers are sent: the failure ends the stream as a failed response (the job was cancelled)
        if (publicFailure(error as FastifyError).internal) request.log.error({ err: error, jobId }, 'response stream failed')
        send('response.failed', { response: { ...started, status: 'cancelled', error: errorOf(error as FastifyError) } })
      } finally {
        raw.end()
      }
      return reply
    },
  })

  api.route({
    ...under('/v1/responses', routes.retrieveResponse),
    handler: async (request) => {
      const owner = keyOwner(request)
      if (request.query.stream === true)
        throw invalidAt('stream', 'stream is not supported when retrieving: retrieve the response as JSON until it ends')
      return responseOfJob(await jobOf(owner, request.params.id))
    },
  })

  api.route({
    ...under('/v1/responses', routes.cancelResponse),
    handler: async (request) => {
      const owner = keyOwner(request)
      const { id } = request.params
      const job = await jobOf(owner, id)
      // cancelling a cancelled response answers it again (OpenAI: idempotent); a finished one stays as it is
      if (job.status === 'pending' || job.status === 'running' || job.status === 'awaiting_approval') await answers.cancel(owner, job.id)
      const now = await jobOf(owner, id)
      if (now.status !== 'cancelled') {
        const why = `response ${id} is already ${statusOf[now.status]}: only a queued or in-progress response can be cancelled`
        throw invalidAt('response_id', why)
      }
      return responseOfJob(now)
    },
  })
}
