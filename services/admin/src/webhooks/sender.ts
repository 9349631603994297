// One webhook delivery attempt: a signed POST that connects only to allowed addresses, follows no
// redirect, is bounded in time and size, and never throws.
import { performance } from 'node:perf_hooks'
import { SpanKind, SpanStatusCode, inSpan } from '@ats/service-kit'
import { Agent, type Dispatcher } from 'undici'
import { checkedUrl, guardedLookup, hostOf, refusalMessage, refusedAddress, type UrlRules } from './urlRules.ts'

const userAgent = 'ats-webhooks/1'

export interface Attempt {
  /** 2xx */
  ok: boolean
  /** the HTTP status, when an answer came */
  status?: number
  /** why it failed without an answer, or why the answer counts as failed ("redirect to … not followed") */
  error?: string
  /** the first bytes of the answer (at most maxResponseBytes, as text) */
  response?: string
  durationMs: number
  /** the refusal was our own rule (a forbidden address, a non-https URL), not the receiver's fault */
  refused?: boolean
}

export interface WebhookRequest {
  url: string
  headers: Record<string, string>
  body: string
  timeoutMs: number
  maxResponseBytes: number
  rules: UrlRules
}

/**
 * POSTs one signed delivery: resolves the host and connects only to an allowed address (the
 * check made at connect time, so DNS rebinding cannot swap it), follows no redirect, gives up
 * after timeoutMs, reads at most maxResponseBytes of the answer. Never throws. With tracing on,
 * in a client span (the receiver gets no traceparent: trace ids stay in the fleet).
 */
export function sendWebhook(request: WebhookRequest): Promise<Attempt> {
  return inSpan(
    'POST webhook',
    { kind: SpanKind.CLIENT, attributes: { 'http.request.method': 'POST', 'ats.upstream': 'webhook' } },
    async (span) => {
      const attempt = await deliver(request)
      if (attempt.status !== undefined) span?.setAttribute('http.response.status_code', attempt.status)
      if (!attempt.ok) span?.setStatus({ code: SpanStatusCode.ERROR, message: attempt.refused ? 'refused' : 'failed' })
      return attempt
    },
  )
}

async function deliver(request: WebhookRequest): Promise<Attempt> {
  const { rules, timeoutMs } = request
  const started = performance.now()
  const done = (attempt: Omit<Attempt, 'durationMs'>): Attempt => ({ ...attempt, durationMs: Math.round(performance.now() - started) })
  let url: URL
  try {
    url = checkedUrl(request.url, rules)
  } catch (error) {
    return done({ ok: false, refused: true, error: (error as Error).message })
  }
  const signal = AbortSignal.timeout(timeoutMs)
  let answer: Dispatcher.ResponseData
  try {
    answer = await (rules.allowPrivate ? openAgent : guardedAgent).request({
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: 'POST',
      headers: { 'content-type': 'application/json', 'user-agent': userAgent, ...request.headers },
      body: request.body,
      signal,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    })
  } catch (error) {
    const refused = refusedAddress(error)
    if (refused) return done({ ok: false, refused: true, error: refusalMessage(url, refused.detail) })
    return done({ ok: false, error: failureMessage(error, url, signal, timeoutMs) })
  }
  const status = answer.statusCode
  const response = await readAtMost(answer.body, request.maxResponseBytes)
  if (status >= 200 && status < 300) return done({ ok: true, status, response })
  if (status >= 300 && status < 400) {
    const location = [answer.headers.location].flat()[0]
    const error = location ? `redirect to ${location.slice(0, 200)} not followed` : `redirect (${status}) not followed`
    return done({ ok: false, status, response, error })
  }
  return done({ ok: false, status, response, error: `receiver answered ${status}` })
}

const keepAlive = { connections: 8, keepAliveTimeout: 4_000, keepAliveMaxTimeout: 10_000 }

/** Keep-alive Agents shared by every delivery, never closed: one connects only to allowed addresses, one to any (development). */
const guardedAgent = new Agent({ ...keepAlive, connect: { lookup: guardedLookup } })
const openAgent = new Agent(keepAlive)

function failureMessage(error: unknown, url: URL, signal: AbortSignal, timeoutMs: number): string {
  const code = (error as { code?: string }).code
  if (signal.aborted || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT')
    return `no answer within the timeout of ${timeoutMs} ms`
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `host ${hostOf(url)} could not be resolved (${code})`
  // the code, not the message: the message may quote internal details
  return `connection failed (${code ?? (error as Error).name})`
}

/** The first `max` bytes of an answer as text; the rest is not read (the stream is destroyed). */
async function readAtMost(body: Dispatcher.ResponseData['body'], max: number): Promise<string> {
  const chunks: Buffer[] = []
  let size = 0
  try {
    for await (const chunk of body) {
      if (size >= max) break
      chunks.push(chunk as Buffer)
      size += (chunk as Buffer).length
    }
  } catch {
    // a receiver that stalls or drops the body after its status: what came is kept
  } finally {
    body.destroy()
  }
  return Buffer.concat(chunks).subarray(0, max).toString('utf8')
}
