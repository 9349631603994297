// The outbound HTTP client services call outside APIs with: deadlines, bounded retries, upstream errors as registry errors.
import { setTimeout as sleep } from 'node:timers/promises'
import { Pool, type Dispatcher } from 'undici'
import { UpstreamFailed, UpstreamRateLimited, UpstreamStatusError, UpstreamTimeout, describeStatus } from './errors.ts'
import { SpanKind, inSpan, tracingEnabled } from './tracing.ts'

export type QueryValue = string | number | boolean | null | undefined
export type Query = Record<string, QueryValue | readonly QueryValue[]>

export interface RequestOptions {
  /** added to the client's query; undefined and null values are left out, arrays repeat the name */
  query?: Query
  headers?: Record<string, string>
  /** this call's whole deadline, retries and their waits included */
  timeoutMs?: number
  /** a deadline per attempt, so a slow attempt is retried within timeoutMs; default: none but timeoutMs */
  attemptTimeoutMs?: number
  /** GET, HEAD, PUT, DELETE and OPTIONS retry unless false; POST and PATCH only when true */
  retry?: boolean
  /** ends the call, the attempt in flight included, and no retry follows: rejects with the signal's reason */
  signal?: AbortSignal
}

export interface HttpClientOptions {
  /** names the upstream in errors and logs: 'coingecko' */
  name: string
  /** origin and optional path prefix: 'https://api.coingecko.com/api/v3' */
  baseUrl: string
  timeoutMs?: number
  attemptTimeoutMs?: number
  /** retries after the first attempt */
  retries?: number
  /** sent with every request (api keys go here or in query, never into messages) */
  headers?: Record<string, string>
  log?: { warn(obj: object, msg: string): void }
}

export interface HttpClient {
  readonly name: string
  /** Sends `body` as JSON when given and resolves to the parsed JSON answer (undefined when empty). */
  request<T>(method: string, path: string, options?: RequestOptions & { body?: unknown }): Promise<T>
  getJson<T>(path: string, options?: RequestOptions): Promise<T>
  postJson<T>(path: string, body: unknown, options?: RequestOptions): Promise<T>
  close(): Promise<void>
}

const idempotentMethods = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS'])
const retriedStatuses = new Set([429, 502, 503, 504])
/** a larger answer fails: upstreams answering megabytes by mistake must not fill the heap */
const maxResponseBytes = 8 * 1024 * 1024
/** a 429 asking to wait longer than this is not retried */
const maxRetryAfterMs = 5_000

/** retry-after in seconds or as an HTTP date, in ms; undefined when absent or unreadable */
function retryAfterMs(value: string | string[] | undefined): number | undefined {
  const text = Array.isArray(value) ? value[0] : value
  if (!text) return undefined
  const seconds = Number(text)
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000)
  const date = Date.parse(text)
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now())
}

const backoffMs = (attempt: number) => {
  const base = 100 * 2 ** attempt
  return base + Math.random() * (base / 2)
}

/** What one attempt came to: an answer to return, or a failure that may be retried. */
type Attempt = { ok: true; value: unknown } | { ok: false; error: Error; retryable: boolean; waitMs?: number; reason: string }

/**
 * A client for one upstream over a keep-alive undici Pool. Every call has a whole
 * deadline (headers and body, retries included) and never hangs past it. Network
 * errors, attempt timeouts, 429 and 502/503/504 are retried with backoff (100 ms,
 * 200 ms, … plus jitter; a small retry-after is honoured) while the deadline leaves
 * room, for idempotent methods only unless the call says `retry: true`.
 */
export function createHttpClient(options: HttpClientOptions): HttpClient {
  const { name, retries = 2 } = options
  const base = new URL(options.baseUrl)
  const prefix = base.pathname.replace(/\/+$/, '')
  const pool = new Pool(base.origin, { connections: 16, keepAliveTimeout: 30_000, maxResponseSize: maxResponseBytes })
  const defaultHeaders = { accept: 'application/json', ...options.headers }

  function target(path: string, query: Query | undefined): string {
    const params = new URLSearchParams(base.searchParams)
    for (const [name, value] of Object.entries(query ?? {})) {
      for (const item of Array.isArray(value) ? value : [value]) {
        if (item !== undefined && item !== null) params.append(name, String(item))
      }
    }
    const search = params.toString()
    const [pathname, inline] = path.split('?', 2)
    const joined = `${prefix}${pathname!.startsWith('/') ? '' : '/'}${pathname}`
    return inline ? `${joined}?${inline}${search ? `&${search}` : ''}` : `${joined}${search ? `?${search}` : ''}`
  }

  async function attempt(
    method: string,
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    ms: number,
    signal: AbortSignal | undefined,
  ): Promise<Attempt> {
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(), ms)
    const abort = () => controller.abort()
    signal?.addEventListener('abort', abort, { once: true })
    try {
      // undici's own timeouts are a backstop; the signal ends headers and body alike
      const res = await pool.request({
        method: method as Dispatcher.HttpMethod,
        path,
        headers,
        body,
        signal: controller.signal,
        headersTimeout: ms,
        bodyTimeout: ms,
      })
      const text = await res.body.text()
      const status = res.statusCode
      if (status >= 200 && status < 300) {
        if (text.trim() === '') return { ok: true, value: undefined }
        try {
          return { ok: true, value: JSON.parse(text) }
        } catch {
          return { ok: false, error: new UpstreamFailed(name, `invalid JSON (status ${status})`), retryable: false, reason: 'invalid JSON' }
        }
      }
      if (status >= 400 && status < 500 && status !== 429) {
        let parsed: unknown = text === '' ? undefined : text
        try {
          parsed = JSON.parse(text)
        } catch {}
        return { ok: false, error: new UpstreamStatusError(name, status, parsed), retryable: false, reason: String(status) }
      }
      const wait = status === 429 ? retryAfterMs(res.headers['retry-after']) : undefined
      return {
        ok: false,
        error: status === 429 ? new UpstreamRateLimited(name) : new UpstreamFailed(name, describeStatus(status)),
        retryable: retriedStatuses.has(status) && (wait === undefined || wait <= maxRetryAfterMs),
        ...(wait === undefined ? {} : { waitMs: wait }),
        reason: String(status),
      }
    } catch (error) {
      const code = (error as { code?: string }).code
      if (controller.signal.aborted || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
        return { ok: false, error: new UpstreamTimeout(name, ms, { cause: error }), retryable: true, reason: 'timeout' }
      }
      if (code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') {
        const reason = `answer larger than ${maxResponseBytes} bytes`
        return { ok: false, error: new UpstreamFailed(name, reason, { cause: error }), retryable: false, reason }
      }
      // the code, not the message: messages of network errors may quote the address
      const reason = code ?? (error as Error).name
      return { ok: false, error: new UpstreamFailed(name, `network error (${reason})`, { cause: error }), retryable: true, reason }
    } finally {
      clearTimeout(timer)
      signal?.removeEventListener('abort', abort)
    }
  }

  /**
   * with tracing on: the call (its retries included) in a client span. Outside APIs get no
   * `traceparent`: trace ids stay within the fleet.
   */
  async function request<T>(method: string, path: string, opts: RequestOptions & { body?: unknown } = {}): Promise<T> {
    if (!tracingEnabled()) return send<T>(method, path, opts)
    const verb = method.toUpperCase()
    // the call's own path, without the base URL's prefix or the query: both may carry api keys
    // (Alchemy's key is a path segment of its base URL)
    const attributes = {
      'http.request.method': verb,
      'server.address': base.hostname,
      'url.path': path.split('?', 1)[0]!,
      'ats.upstream': name,
    }
    return inSpan(`${verb} ${name}`, { kind: SpanKind.CLIENT, attributes }, (span) =>
      send<T>(method, path, opts).catch((error) => {
        if (error instanceof UpstreamStatusError) span?.setAttribute('http.response.status_code', error.status)
        throw error
      }),
    )
  }

  async function send<T>(method: string, path: string, opts: RequestOptions & { body?: unknown } = {}): Promise<T> {
    const verb = method.toUpperCase()
    const timeoutMs = opts.timeoutMs ?? options.timeoutMs ?? 10_000
    const attemptMs = opts.attemptTimeoutMs ?? options.attemptTimeoutMs ?? timeoutMs
    const deadline = Date.now() + timeoutMs
    const mayRetry = opts.retry ?? idempotentMethods.has(verb)
    const headers: Record<string, string> = { ...defaultHeaders, ...opts.headers }
    let body: string | undefined
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body)
      if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json'
    }
    const url = target(path, opts.query)
    // retries are this loop, not undici's retry interceptor: that one resumes a 2xx body broken
    // mid-way with a Range request, which JSON APIs answer with the whole body again and it then
    // fails (UND_ERR_REQ_RETRY); and its attempt limits are idle timeouts, not one attempt deadline
    for (let i = 0; ; i++) {
      opts.signal?.throwIfAborted()
      const left = Math.max(1, deadline - Date.now())
      const outcome = await attempt(verb, url, headers, body, Math.min(attemptMs, left), opts.signal)
      opts.signal?.throwIfAborted()
      if (outcome.ok) return outcome.value as T
      if (outcome.reason === 'timeout') {
        // name the limit the caller set, not what was left of it
        const limit = attemptMs < left ? attemptMs : timeoutMs
        outcome.error = new UpstreamTimeout(name, limit, { cause: outcome.error.cause })
      }
      const delay = outcome.waitMs ?? backoffMs(i)
      // a wait that would reach the deadline only turns a quick 502 into a slow 504
      if (!outcome.retryable || !mayRetry || i >= retries || Date.now() + delay >= deadline) throw outcome.error
      const where = path.split('?')[0]
      options.log?.warn({ upstream: name, method: verb, path: where, attempt: i + 1, reason: outcome.reason }, 'retrying upstream request')
      await sleep(delay)
    }
  }

  return {
    name,
    request,
    getJson: (path, opts) => request('GET', path, opts),
    postJson: (path, body, opts) => request('POST', path, { ...opts, body }),
    close: () => pool.close(),
  }
}
