// One turn of an OpenAI-compatible chat-completions API through the `openai` SDK, streamed:
// content deltas go to the caller as they arrive, tool-call deltas are put together by index,
// and the usage comes with the last chunk. A server that answers one JSON body anyway is read as
// before. Failures are the service kit's upstream errors. The SDK does not retry: a turn is
// retried here, and only while none of its text went out (a retry after that would repeat or change it).
import { STATUS_CODES } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { SpanKind, UpstreamFailed, UpstreamRateLimited, UpstreamStatusError, UpstreamTimeout, inSpan } from '@ats/service-kit'
import OpenAI, { APIConnectionError, APIError } from 'openai'
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageFunctionToolCall,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions'
import type { CompletionUsage } from 'openai/resources/completions'
import type { Stream } from 'openai/streaming'
import type { LlmSettings } from './llm.ts'
import { RunnerError } from './runner.ts'

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  tool_calls?: ToolCall[]
  tool_call_id?: string
}
export type ToolCall = ChatCompletionMessageFunctionToolCall

/** What the model answered in one turn: its text, the tools it asks for, its own token count when given. */
export interface Turn {
  content: string
  toolCalls: ToolCall[]
  usage: CompletionUsage | undefined
}

/** What a turn asks the model; streaming and its usage chunk are asked for here. */
export type TurnRequest = Omit<ChatCompletionCreateParamsStreaming, 'messages' | 'stream' | 'stream_options'> & { messages: ChatMessage[] }

const name = 'the language model'
/** attempts after the first, while none of the turn's text went out */
const retries = 2
const retriedStatuses = new Set([429, 502, 503, 504])
/** a longer answer fails: a model server streaming without end must not fill the heap */
const maxAnswerChars = 8 * 1024 * 1024

/** An attempt's failure, and whether another attempt may succeed. */
class AttemptFailed extends Error {
  constructor(
    readonly error: Error,
    readonly retryable: boolean,
  ) {
    super(error.message)
  }
}
const failed = (reason: string, retryable: boolean, cause?: unknown) =>
  new AttemptFailed(new UpstreamFailed(name, reason, cause === undefined ? undefined : { cause }), retryable)

/** A network failure, named by the code under the SDK's wrapping, not the message: messages may quote the address. */
function networkFailure(error: Error): AttemptFailed {
  let inner = error
  while (typeof (inner as { code?: unknown }).code !== 'string' && inner.cause instanceof Error) inner = inner.cause
  const code = (inner as { code?: unknown }).code
  return failed(`network error (${typeof code === 'string' ? code : inner.name})`, true, error)
}

/** What an attempt's error comes to: an upstream error, and whether to try again. */
function failureOf(error: unknown): Error {
  if (error instanceof AttemptFailed || error instanceof RunnerError) return error
  if (error instanceof APIConnectionError) return networkFailure(error)
  if (error instanceof APIError) {
    const { status } = error
    // an `error` chunk in the stream
    if (status === undefined) {
      const message = (error.error as { message?: unknown } | undefined)?.message
      return failed(`an error in the stream: ${typeof message === 'string' ? message : 'unknown'}`, true)
    }
    if (status === 429) return new AttemptFailed(new UpstreamRateLimited(name), true)
    if (status < 500) return new AttemptFailed(new UpstreamStatusError(name, status, error.error && { error: error.error }), false)
    return failed(`${status} ${STATUS_CODES[status] ?? ''}`.trim(), retriedStatuses.has(status))
  }
  if (error instanceof SyntaxError) return failed('a streamed chunk that is not JSON', false)
  return networkFailure(error as Error)
}

/** Reads the streamed chunks into a turn, handing each content delta to `onContent`. */
async function readStream(stream: Stream<ChatCompletionChunk>, onContent: (text: string) => void): Promise<Turn> {
  let content = ''
  const calls: ToolCall[] = []
  let usage: CompletionUsage | undefined
  let finished = false
  let size = 0
  const count = (text: string | null | undefined) => {
    size += text?.length ?? 0
    if (size > maxAnswerChars) throw failed(`answer longer than ${maxAnswerChars} characters`, false)
  }
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage
    const choice = chunk.choices?.[0]
    if (!choice) continue
    if (choice.finish_reason) finished = true
    const delta = choice.delta ?? {}
    if (typeof delta.content === 'string' && delta.content !== '') {
      count(delta.content)
      content += delta.content
      onContent(delta.content)
    }
    for (const part of delta.tool_calls ?? []) {
      count(part.function?.arguments)
      calls[part.index ?? 0] ??= { id: '', type: 'function', function: { name: '', arguments: '' } }
      const call = calls[part.index ?? 0]!
      if (part.id) call.id = part.id
      if (part.function?.name) call.function.name = part.function.name
      if (part.function?.arguments) call.function.arguments += part.function.arguments
    }
  }
  // a stream that ends (a server may send no [DONE]) before the answer said it finished broke off
  if (!finished) throw failed('the stream ended before the answer did', true)
  return { content, toolCalls: calls.filter(Boolean), usage }
}

/** Reads an answer in one JSON body, handing its text to `onContent`. */
async function readBody(response: Response, onContent: (text: string) => void): Promise<Turn> {
  const text = await response.text()
  let completion: ChatCompletion
  try {
    completion = JSON.parse(text) as ChatCompletion
  } catch {
    throw failed(`invalid JSON (status ${response.status})`, false)
  }
  const message = completion?.choices?.[0]?.message
  if (!message) throw new RunnerError('the language model answered without a message')
  if (message.content) onContent(message.content)
  return { content: message.content ?? '', toolCalls: (message.tool_calls ?? []) as ToolCall[], usage: completion.usage }
}

/** `timeoutMs`: one turn, retries included */
export function createCompletions(settings: Pick<LlmSettings, 'baseUrl' | 'apiKey' | 'timeoutMs'>) {
  const client = new OpenAI({
    baseURL: settings.baseUrl,
    // without a key no authorization header goes out (a local server needs none); the SDK wants one anyway
    apiKey: settings.apiKey ?? 'none',
    ...(settings.apiKey ? {} : { defaultHeaders: { authorization: null } }),
    // the settings say who we are, not the process's OPENAI_* variables
    adminAPIKey: null,
    organization: null,
    project: null,
    maxRetries: 0,
    timeout: settings.timeoutMs,
    // its log would quote what the model answered
    logLevel: 'off',
  })
  const span = {
    kind: SpanKind.CLIENT,
    attributes: { 'http.request.method': 'POST', 'server.address': new URL(settings.baseUrl).hostname, 'ats.upstream': 'llm' },
  }

  /** One request and its answer, in a client span when tracing is on (the model's provider gets no traceparent). */
  const attempt = (request: ChatCompletionCreateParamsStreaming, signal: AbortSignal, onContent: (text: string) => void) =>
    inSpan('POST llm chat/completions', span, async (): Promise<Turn> => {
      try {
        const { data, response } = await client.chat.completions.create(request, { signal }).withResponse()
        const type = response.headers.get('content-type') ?? ''
        return await (type.includes('text/event-stream') ? readStream(data, onContent) : readBody(response, onContent))
      } catch (error) {
        if (signal.aborted) throw error
        throw failureOf(error)
      }
    })

  /**
   * Sends one turn and reads the answer. `onContent` gets the text deltas in order. Fails with the
   * service kit's upstream errors; a failure after some text went out is a RunnerError (the job
   * fails: its followers have seen text another attempt would not repeat).
   */
  async function complete(request: TurnRequest, signal: AbortSignal, onContent: (text: string) => void): Promise<Turn> {
    const messages = request.messages as ChatCompletionMessageParam[]
    const streamed = { ...request, messages, stream: true as const, stream_options: { include_usage: true } }
    const deadline = AbortSignal.timeout(settings.timeoutMs)
    const both = AbortSignal.any([signal, deadline])
    let sent = false
    const forward = (text: string) => {
      sent = true
      onContent(text)
    }
    for (let i = 0; ; i++) {
      try {
        return await attempt(streamed, both, forward)
      } catch (error) {
        signal.throwIfAborted()
        const failure = deadline.aborted
          ? new UpstreamTimeout(name, settings.timeoutMs, { cause: error })
          : error instanceof AttemptFailed
            ? error.error
            : (error as Error)
        if (sent) throw new RunnerError(`the language model's answer broke off: ${failure.message}`)
        const retryable = error instanceof AttemptFailed && error.retryable
        if (!retryable || deadline.aborted || i >= retries) throw failure
        const base = 100 * 2 ** i
        await sleep(base + Math.random() * (base / 2), undefined, { signal: both }).catch(() => undefined)
      }
    }
  }

  return { complete }
}
