// One turn of an OpenAI-compatible chat-completions API, streamed: the request asks for
// server-sent chunks, content deltas go to the caller as they arrive, tool-call deltas are
// put together by index, and the usage comes with the last chunk. A server that answers one
// JSON body anyway is read as before. Failures are the service kit's upstream errors; a turn is
// retried only while none of its text went out (a retry after that would repeat or change it).
import { setTimeout as sleep } from 'node:timers/promises'
import { SpanKind, UpstreamFailed, UpstreamRateLimited, UpstreamStatusError, UpstreamTimeout, inSpan } from '@ats/service-kit'
import { RunnerError } from './runner.ts'

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  tool_calls?: ToolCall[]
  tool_call_id?: string
}
export interface ToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}
export interface ModelUsage {
  prompt_tokens?: number
  completion_tokens?: number
}

/** What the model answered in one turn: its text, the tools it asks for, its own token count when given. */
export interface Turn {
  content: string
  toolCalls: ToolCall[]
  usage: ModelUsage | undefined
}

interface Completion {
  choices?: Array<{ message?: { content?: string | null; tool_calls?: ToolCall[] } }>
  usage?: ModelUsage
}
interface Chunk {
  choices?: Array<{
    delta?: {
      content?: string | null
      tool_calls?: Array<{ index?: number; id?: string; type?: 'function'; function?: { name?: string; arguments?: string } }>
    }
    finish_reason?: string | null
  }>
  usage?: ModelUsage | null
  error?: { message?: string }
}

export interface CompletionsSettings {
  baseUrl: string
  apiKey: string | undefined
  /** one turn, retries included */
  timeoutMs: number
  retries?: number
}

const name = 'the language model'
const retriedStatuses = new Set([429, 502, 503, 504])
/** a larger answer fails: a model server streaming without end must not fill the heap */
const maxAnswerBytes = 8 * 1024 * 1024

/** An attempt's failure, and whether another attempt may succeed. */
class AttemptFailed extends Error {
  constructor(
    readonly error: Error,
    readonly retryable: boolean,
  ) {
    super(error.message)
  }
}

const lineEnd = /\r\n|\n|\r/

/** Reads a stream of server-sent events: yields each event's data, ends at the stream's end. */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder()
  let buffer = ''
  let data: string[] = []
  let bytes = 0
  for await (const part of body as unknown as AsyncIterable<Uint8Array>) {
    bytes += part.byteLength
    if (bytes > maxAnswerBytes) throw new AttemptFailed(new UpstreamFailed(name, `answer larger than ${maxAnswerBytes} bytes`), false)
    buffer += decoder.decode(part, { stream: true })
    for (let end = buffer.search(lineEnd); end >= 0; end = buffer.search(lineEnd)) {
      // a \r last may be the first half of a \r\n
      if (end === buffer.length - 1 && buffer.endsWith('\r')) break
      const line = buffer.slice(0, end)
      buffer = buffer.slice(end + (buffer.startsWith('\r\n', end) ? 2 : 1))
      if (line === '') {
        if (data.length > 0) yield data.join('\n')
        data = []
      } else if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5))
    }
  }
  if (data.length > 0) yield data.join('\n')
}

export function createCompletions(settings: CompletionsSettings) {
  const url = `${settings.baseUrl.replace(/\/+$/, '')}/chat/completions`
  const retries = settings.retries ?? 2
  const headers = {
    'content-type': 'application/json',
    accept: 'text/event-stream, application/json',
    ...(settings.apiKey ? { authorization: `Bearer ${settings.apiKey}` } : {}),
  }

  /** Reads the streamed chunks into a turn, handing each content delta to `onContent`. */
  async function readStream(body: ReadableStream<Uint8Array>, onContent: (text: string) => void): Promise<Turn> {
    let content = ''
    const calls: ToolCall[] = []
    let usage: ModelUsage | undefined
    let finished = false
    for await (const data of sseData(body)) {
      if (data.trim() === '[DONE]') return { content, toolCalls: calls.filter(Boolean), usage }
      let chunk: Chunk
      try {
        chunk = JSON.parse(data) as Chunk
      } catch {
        throw new AttemptFailed(new UpstreamFailed(name, 'a streamed chunk that is not JSON'), false)
      }
      if (chunk.error)
        throw new AttemptFailed(new UpstreamFailed(name, `an error in the stream: ${chunk.error.message ?? 'unknown'}`), true)
      if (chunk.usage) usage = chunk.usage
      const choice = chunk.choices?.[0]
      if (!choice) continue
      if (choice.finish_reason) finished = true
      const delta = choice.delta ?? {}
      if (typeof delta.content === 'string' && delta.content !== '') {
        content += delta.content
        onContent(delta.content)
      }
      for (const part of delta.tool_calls ?? []) {
        const index = part.index ?? 0
        calls[index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } }
        const call = calls[index]
        if (part.id) call.id = part.id
        if (part.function?.name) call.function.name = part.function.name
        if (part.function?.arguments) call.function.arguments += part.function.arguments
      }
    }
    // some servers end the stream without [DONE]; an answer that did not finish broke off
    if (!finished) throw new AttemptFailed(new UpstreamFailed(name, 'the stream ended before the answer did'), true)
    return { content, toolCalls: calls.filter(Boolean), usage }
  }

  /** One request and its answer; a connection that fails on the way (before or while the answer is read) may be retried. */
  const spanOf = () => ({
    kind: SpanKind.CLIENT,
    attributes: { 'http.request.method': 'POST', 'server.address': new URL(url).hostname, 'ats.upstream': 'llm' },
  })

  /** One attempt, in a client span when tracing is on (the model's provider gets no traceparent). */
  const attempt = (body: string, signal: AbortSignal, onContent: (text: string) => void): Promise<Turn> =>
    inSpan('POST llm chat/completions', spanOf, () => attemptOnce(body, signal, onContent))

  async function attemptOnce(body: string, signal: AbortSignal, onContent: (text: string) => void): Promise<Turn> {
    try {
      return await answerOf(await fetch(url, { method: 'POST', headers, body, signal }), onContent)
    } catch (error) {
      if (signal.aborted || error instanceof AttemptFailed || error instanceof RunnerError) throw error
      // the code, not the message: messages of network errors may quote the address
      const code = (error as { cause?: { code?: string } }).cause?.code
      throw new AttemptFailed(new UpstreamFailed(name, `network error (${code ?? (error as Error).name})`, { cause: error }), true)
    }
  }

  async function answerOf(res: Response, onContent: (text: string) => void): Promise<Turn> {
    const type = res.headers.get('content-type') ?? ''
    if (res.ok && res.body && type.includes('text/event-stream')) return readStream(res.body, onContent)
    const text = await res.text()
    if (res.ok) {
      let completion: Completion
      try {
        completion = JSON.parse(text) as Completion
      } catch {
        throw new AttemptFailed(new UpstreamFailed(name, `invalid JSON (status ${res.status})`), false)
      }
      const message = completion?.choices?.[0]?.message
      if (!message) throw new RunnerError('the language model answered without a message')
      if (message.content) onContent(message.content)
      return { content: message.content ?? '', toolCalls: message.tool_calls ?? [], usage: completion.usage }
    }
    if (res.status === 429) throw new AttemptFailed(new UpstreamRateLimited(name), true)
    if (res.status >= 400 && res.status < 500) {
      let parsed: unknown = text === '' ? undefined : text
      try {
        parsed = JSON.parse(text)
      } catch {}
      throw new AttemptFailed(new UpstreamStatusError(name, res.status, parsed), false)
    }
    throw new AttemptFailed(new UpstreamFailed(name, `${res.status} ${res.statusText}`.trim()), retriedStatuses.has(res.status))
  }

  /**
   * Sends one turn and reads the answer. `onContent` gets the text deltas in order. Fails with the
   * service kit's upstream errors; a failure after some text went out is a RunnerError (the job
   * fails: its followers have seen text another attempt would not repeat).
   */
  async function complete(request: Record<string, unknown>, signal: AbortSignal, onContent: (text: string) => void): Promise<Turn> {
    const body = JSON.stringify({ ...request, stream: true, stream_options: { include_usage: true } })
    const deadline = AbortSignal.timeout(settings.timeoutMs)
    const both = AbortSignal.any([signal, deadline])
    let sent = false
    const forward = (text: string) => {
      sent = true
      onContent(text)
    }
    for (let i = 0; ; i++) {
      try {
        return await attempt(body, both, forward)
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
