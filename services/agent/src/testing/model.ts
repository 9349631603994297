// A stand-in language model for tests and the benchmark: a local OpenAI-compatible
// chat-completions server (POST /v1/chat/completions) that asks for the tool calls a test plans
// and answers with text built from the tools' outputs (so the text proves the tools ran). It
// answers one JSON body, or with `stream: true` server-sent chunks in OpenAI's shape (content and
// tool-call deltas, usage last with stream_options.include_usage, then [DONE]), a token at a time.
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { piecesOf } from '../answers/progress.ts'

export interface StandInCall {
  name: string
  /** JSON text, as a model writes it */
  arguments: string
}

export interface StandInRequest {
  body: {
    model: string
    stream?: boolean
    stream_options?: { include_usage?: boolean }
    messages: Array<{ role: string; content: string | null; tool_calls?: unknown[]; tool_call_id?: string }>
    tools: Array<{ type: string; function: { name: string; description: string; parameters: { type: string } } }>
  }
  authorization: string | undefined
  stream: boolean
  /** when the answer's first and last token went out (Date.now()), once they have */
  sent: { first?: number; last?: number }
}

export interface StandInOptions {
  /**
   * The tools to ask for, on every turn: `round` is how many times the tools have answered in
   * this conversation turn (0 for a fresh user message). No calls: the model answers. Default:
   * no tools. `text` is said before the calls (a turn that ends in tool calls may say something).
   */
  plan?: (prompt: string, round: number) => StandInCall[] | { text?: string; calls: StandInCall[] }
  /** The answer: by default "From the tools: " and their outputs joined by " | ", or "You said: <prompt>" when none ran. */
  answer?: (prompt: string, toolOutputs: string[]) => string
  /** the wait before each streamed token, tool-call pieces included (default 0) */
  tokenDelayMs?: number
  /** awaited before each answer starts: a test holds the model until it is ready to watch */
  gate?: (request: StandInRequest) => Promise<void> | void
  /** answer one JSON body even when asked to stream (as some servers do) */
  neverStreams?: boolean
  /** a failure for the request numbered `index` (from 0): an HTTP status, or the connection cut after some streamed tokens */
  fault?: (index: number) => { status: number } | { cutAfterTokens: number } | undefined
}

export interface StandInModel {
  /** the base URL for LLM_BASE_URL (ends in /v1) */
  url: string
  /** every chat-completions request, in order */
  requests: StandInRequest[]
  close(): Promise<void>
}

const defaultAnswer = (prompt: string, outputs: string[]) =>
  outputs.length > 0 ? `From the tools: ${outputs.join(' | ')}` : `You said: ${prompt}`

/** The chunks of one answer, in OpenAI's streaming shape: text a word at a time, each tool call as its name then its arguments in halves. */
function deltasOf(text: string, calls: StandInCall[], callId: (i: number) => string) {
  const deltas: Array<Record<string, unknown>> = piecesOf(text).map((content) => ({ content }))
  calls.forEach((call, index) => {
    const half = Math.ceil(call.arguments.length / 2)
    deltas.push({ tool_calls: [{ index, id: callId(index), type: 'function', function: { name: call.name, arguments: '' } }] })
    for (const part of [call.arguments.slice(0, half), call.arguments.slice(half)]) {
      if (part) deltas.push({ tool_calls: [{ index, function: { arguments: part } }] })
    }
  })
  return deltas
}

export async function startStandInModel(options: StandInOptions = {}): Promise<StandInModel> {
  const { plan = () => [], answer = defaultAnswer, tokenDelayMs = 0, gate, neverStreams = false, fault } = options
  const requests: StandInRequest[] = []

  /** Answers the request numbered `index` (from 0). */
  async function reply(request: StandInRequest, index: number, res: ServerResponse) {
    const { body } = request
    const prompt = [...body.messages].reverse().find((m) => m.role === 'user')?.content ?? ''
    // the tool rounds since the last user message
    const sinceUser = body.messages.slice(body.messages.map((m) => m.role).lastIndexOf('user') + 1)
    const round = sinceUser.filter((m) => m.role === 'assistant' && m.tool_calls).length
    const planned = plan(prompt, round)
    const { text: said = '', calls } = Array.isArray(planned) ? { calls: planned } : planned
    const text =
      calls.length > 0
        ? said
        : answer(
            prompt,
            sinceUser.filter((m) => m.role === 'tool').map((m) => m.content ?? ''),
          )
    const callId = (i: number) => `call_${index}_${i}`
    const finish = calls.length > 0 ? 'tool_calls' : 'stop'
    // usage as a provider reports it: a number a test can recognise in the sums
    const usage = { prompt_tokens: 1000 + body.messages.length, completion_tokens: 7, total_tokens: 1007 + body.messages.length }
    const head = { id: `chatcmpl-${index}`, created: Math.floor(Date.now() / 1000), model: body.model, system_fingerprint: null }
    await gate?.(request)
    const failure = fault?.(index)
    if (failure && 'status' in failure) {
      res
        .writeHead(failure.status, { 'content-type': 'application/json' })
        .end(JSON.stringify({ error: { message: 'the stand-in failed as told', type: 'server_error' } }))
      return
    }

    if (!request.stream || neverStreams) {
      const message = {
        role: 'assistant',
        content: text || null,
        ...(calls.length > 0 ? { tool_calls: calls.map((c, i) => ({ id: callId(i), type: 'function', function: c })) } : {}),
      }
      request.sent.first = request.sent.last = Date.now()
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(
        JSON.stringify({
          ...head,
          object: 'chat.completion',
          usage,
          choices: [{ index: 0, message, logprobs: null, finish_reason: finish }],
        }),
      )
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    const chunk = (fields: Record<string, unknown>) =>
      res.write(`data: ${JSON.stringify({ ...head, object: 'chat.completion.chunk', ...fields })}\n\n`)
    const choice = (delta: Record<string, unknown>, finishReason: string | null = null) => ({
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    })
    chunk(choice({ role: 'assistant', content: '' }))
    for (const [i, delta] of deltasOf(text, calls, callId).entries()) {
      if (tokenDelayMs > 0) await sleep(tokenDelayMs)
      if (failure && i === failure.cutAfterTokens) {
        // what was written reaches the client first
        await new Promise((resolve) => res.write('', resolve))
        res.destroy()
      }
      if (res.destroyed) return
      chunk(choice(delta))
      request.sent.first ??= Date.now()
      request.sent.last = Date.now()
    }
    chunk(choice({}, finish))
    if (body.stream_options?.include_usage) chunk({ choices: [], usage })
    res.end('data: [DONE]\n\n')
  }

  const server = createServer((req, res) => {
    let raw = ''
    req.on('data', (part) => (raw += part))
    req.on('end', () => {
      if (req.url !== '/v1/chat/completions' || req.method !== 'POST') {
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message: 'not found', type: 'invalid_request_error' } }))
        return
      }
      const body = JSON.parse(raw) as StandInRequest['body']
      const request: StandInRequest = { body, authorization: req.headers.authorization, stream: body.stream === true, sent: {} }
      reply(request, requests.push(request) - 1, res).catch((error: Error) => res.destroy(error))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
