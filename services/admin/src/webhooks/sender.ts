// The outbound side of webhooks: which URLs and addresses a delivery may reach, the Standard Webhooks
// signature, and the one HTTP attempt (no redirects, bounded in time and size, never throws).
import { randomBytes } from 'node:crypto'
import * as dns from 'node:dns'
import { lookup as resolveAll } from 'node:dns/promises'
import { isIP, isIPv4, type LookupFunction } from 'node:net'
import { performance } from 'node:perf_hooks'
import { BadRequest, SpanKind, SpanStatusCode, inSpan, tracingEnabled } from '@ats/service-kit'
import { Webhook } from 'standardwebhooks'
import { Agent, type Dispatcher } from 'undici'

/** Where deliveries may go: development settings loosen it (WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE_ADDRESSES). */
export interface UrlRules {
  allowHttp: boolean
  allowPrivate: boolean
}

const userAgent = 'ats-webhooks/1'
const privateHint = 'set WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true for development only'

/**
 * Checks a webhook URL when a subscription is made or changed: https (http only with allowHttp),
 * no credentials in it, and a host that does not resolve to a loopback, private, link-local,
 * metadata or otherwise internal address (unless allowPrivate). Throws BadRequest naming what is wrong.
 */
export async function checkWebhookUrl(url: string, rules: UrlRules): Promise<void> {
  const parsed = parseWebhookUrl(url, rules)
  if (rules.allowPrivate) return
  const host = hostOf(parsed)
  const refusal = isIP(host) ? addressRefusal(host) : await hostRefusal(host)
  if (refusal) throw new BadRequest(refusalMessage(parsed, refusal))
}

/** Why an address may not be sent to (undefined: it may): "loopback", "private (10.0.0.0/8)", "link-local / cloud metadata"… */
export function forbiddenAddress(ip: string): string | undefined {
  const bytes = ipBytes(ip)
  if (!bytes) return 'not an IP address'
  if (bytes.length === 4) return firstMatch(v4Ranges, bytes)
  for (const { range, at } of embeddingRanges) {
    if (!range.contains(bytes)) continue
    const inner = firstMatch(v4Ranges, bytes.slice(at, at + 4))
    // an IPv4-mapped address is the IPv4 host itself; the others reach it through a gateway
    if (!range.reason) return inner
    return inner && `${inner} via ${range.reason}`
  }
  return firstMatch(v6Ranges, bytes)
}

export interface Signed {
  'webhook-id': string
  'webhook-timestamp': string
  /** one `v1,<base64>` per secret, space-separated (the current secret, then the one in its grace period) */
  'webhook-signature': string
}

/** Standard Webhooks headers for `body`, signed with every secret given (whsec_…). */
export function signWebhook(id: string, at: Date, body: string, secrets: string[]): Signed {
  if (secrets.length === 0) throw new Error('signWebhook needs at least one secret')
  return {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': secrets.map((secret) => new Webhook(secret).sign(id, at, body)).join(' '),
  }
}

/** A new secret, `whsec_` + base64 of 24 random bytes (the Standard Webhooks format). */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`
}

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

/**
 * POSTs one signed delivery: resolves the host and connects only to an allowed address (the
 * check made at connect time, so DNS rebinding cannot swap it), follows no redirect, gives up
 * after timeoutMs, reads at most maxResponseBytes of the answer. Never throws.
 */
export interface WebhookRequest {
  url: string
  headers: Record<string, string>
  body: string
  timeoutMs: number
  maxResponseBytes: number
  rules: UrlRules
}

/** sendWebhook in a client span when tracing is on (the receiver gets no traceparent: trace ids stay in the fleet). */
export function sendWebhook(request: WebhookRequest): Promise<Attempt> {
  if (!tracingEnabled()) return deliver(request)
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
    url = parseWebhookUrl(request.url, rules)
    // the connect-time lookup is not called for an IP literal: it is checked here
    const host = hostOf(url)
    const refusal = !rules.allowPrivate && isIP(host) ? addressRefusal(host) : undefined
    if (refusal) return done({ ok: false, refused: true, error: refusalMessage(url, refusal) })
  } catch (error) {
    return done({ ok: false, refused: true, error: (error as Error).message })
  }
  const signal = AbortSignal.timeout(timeoutMs)
  let answer: Dispatcher.ResponseData
  try {
    answer = await agentFor(rules).request({
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

/** The checks that need no DNS: scheme, credentials, fragment, host. Throws BadRequest. */
function parseWebhookUrl(url: string, rules: UrlRules): URL {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new BadRequest('webhook URL is not a valid absolute URL')
  }
  const schemes = rules.allowHttp ? ['https:', 'http:'] : ['https:']
  if (!schemes.includes(parsed.protocol)) {
    throw new BadRequest(
      rules.allowHttp
        ? 'webhook URL must use https or http'
        : 'webhook URL must use https (http is allowed only with WEBHOOK_ALLOW_HTTP=true, for development)',
    )
  }
  if (parsed.username || parsed.password) throw new BadRequest('webhook URL must not contain a username or password')
  if (parsed.href.includes('#')) throw new BadRequest('webhook URL must not contain a fragment (#…)')
  if (!parsed.hostname) throw new BadRequest('webhook URL has no host')
  return parsed
}

/** The host to resolve or connect to: IPv6 literals without their brackets. */
const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1')

/** The URL as a message may show it: no query, which may carry a token. */
const shown = (url: URL) => `${url.origin}${url.pathname}`

function refusalMessage(url: URL, detail: string): string {
  return `webhook URL ${shown(url)} is refused: ${detail} (${privateHint})`
}

function addressRefusal(ip: string): string | undefined {
  const reason = forbiddenAddress(ip)
  return reason && `${ip} is ${article(reason)} ${reason} address`
}

function resolvedRefusal(host: string, addresses: string[]): string | undefined {
  for (const address of addresses) {
    const reason = forbiddenAddress(address)
    if (reason) return `${host} resolves to ${address}, ${article(reason)} ${reason} address`
  }
  return undefined
}

const article = (word: string) => (/^([aeio]|un(?!i))/i.test(word) ? 'an' : 'a')

async function hostRefusal(host: string): Promise<string | undefined> {
  let addresses: string[]
  try {
    addresses = (await resolveAll(host, { all: true })).map(({ address }) => address)
  } catch (error) {
    throw new BadRequest(`webhook URL host ${host} could not be resolved (${(error as { code?: string }).code ?? 'DNS error'})`)
  }
  if (addresses.length === 0) throw new BadRequest(`webhook URL host ${host} has no address`)
  return resolvedRefusal(host, addresses)
}

/** A connect-time refusal, carried through undici to sendWebhook. */
class RefusedAddress extends Error {
  readonly code = 'ATS_WEBHOOK_REFUSED_ADDRESS'
  constructor(readonly detail: string) {
    super(detail)
  }
}

function refusedAddress(error: unknown): RefusedAddress | undefined {
  for (let e = error; e instanceof Error; e = e.cause) if (e instanceof RefusedAddress) return e
  return undefined
}

/** dns.lookup that refuses a host if any of its addresses is forbidden: the addresses it returns are the ones connected to. */
const guardedLookup: LookupFunction = (hostname, options, callback) => {
  dns.lookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, [])
    const refusal = resolvedRefusal(
      hostname,
      addresses.map(({ address }) => address),
    )
    if (refusal) return callback(new RefusedAddress(refusal), [])
    if (options.all) return callback(null, addresses)
    const [first] = addresses
    if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), [])
    callback(null, first.address, first.family)
  })
}

/** One keep-alive Agent per address rule, shared by every delivery; never closed. */
const agents = new Map<boolean, Agent>()

function agentFor(rules: UrlRules): Agent {
  let agent = agents.get(rules.allowPrivate)
  if (!agent) {
    agent = new Agent({
      connections: 8,
      keepAliveTimeout: 4_000,
      keepAliveMaxTimeout: 10_000,
      ...(rules.allowPrivate ? {} : { connect: { lookup: guardedLookup } }),
    })
    agents.set(rules.allowPrivate, agent)
  }
  return agent
}

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

/** An address range; `reason` says why it is refused (for embedding ranges, what embeds the IPv4 address). */
class Range {
  readonly base: number[]
  readonly bits: number
  constructor(
    cidr: string,
    readonly reason: string,
  ) {
    const [address, bits] = cidr.split('/')
    this.base = ipBytes(address!)!
    this.bits = Number(bits)
  }
  contains(bytes: number[]): boolean {
    if (bytes.length !== this.base.length) return false
    for (let bit = 0; bit < this.bits; bit += 8) {
      const mask = (0xff << (8 - Math.min(8, this.bits - bit))) & 0xff
      if ((bytes[bit / 8]! & mask) !== (this.base[bit / 8]! & mask)) return false
    }
    return true
  }
}

const ranges = (list: [string, string][]) => list.map(([cidr, reason]) => new Range(cidr, reason))

// The first match names the reason, so the narrower ranges come first. Documentation ranges
// (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) are not routed anyway and stay allowed.
const v4Ranges = ranges([
  ['0.0.0.0/8', 'unspecified (0.0.0.0/8)'],
  ['127.0.0.0/8', 'loopback'],
  ['10.0.0.0/8', 'private (10.0.0.0/8)'],
  ['100.100.100.200/32', 'cloud metadata (100.100.100.200)'],
  ['100.64.0.0/10', 'carrier-grade NAT (100.64.0.0/10)'],
  ['169.254.169.254/32', 'link-local / cloud metadata'],
  ['169.254.0.0/16', 'link-local (169.254.0.0/16)'],
  ['172.16.0.0/12', 'private (172.16.0.0/12)'],
  ['192.0.0.0/24', 'IETF protocol assignment (192.0.0.0/24)'],
  ['192.168.0.0/16', 'private (192.168.0.0/16)'],
  ['198.18.0.0/15', 'benchmarking (198.18.0.0/15)'],
  ['224.0.0.0/4', 'multicast'],
  ['255.255.255.255/32', 'broadcast'],
  ['240.0.0.0/4', 'reserved (240.0.0.0/4)'],
])

/** IPv6 ranges that carry an IPv4 address at byte `at`: that address is checked. */
const embeddingRanges = [
  { range: new Range('::ffff:0:0/96', ''), at: 12 },
  { range: new Range('::ffff:0:0:0/96', 'IPv4-translated'), at: 12 },
  { range: new Range('64:ff9b::/96', 'NAT64'), at: 12 },
  { range: new Range('2002::/16', '6to4'), at: 2 },
]

const v6Ranges = ranges([
  ['::/128', 'unspecified (::)'],
  ['::1/128', 'loopback'],
  ['::/96', 'IPv4-compatible (::/96, deprecated)'],
  ['64:ff9b:1::/48', 'NAT64 local-use (64:ff9b:1::/48)'],
  ['100::/64', 'discard-only (100::/64)'],
  ['2001::/32', 'Teredo tunnel (2001::/32)'],
  ['fd00:ec2::254/128', 'unique-local / cloud metadata'],
  ['fc00::/7', 'unique-local (fc00::/7)'],
  ['fe80::/10', 'link-local (fe80::/10)'],
  ['fec0::/10', 'site-local (fec0::/10, deprecated)'],
  ['ff00::/8', 'multicast'],
])

const firstMatch = (list: Range[], bytes: number[]) => list.find((range) => range.contains(bytes))?.reason

/** 4 bytes for IPv4, 16 for IPv6 (a zone `%eth0` is dropped), undefined for anything else. */
function ipBytes(ip: string): number[] | undefined {
  const address = ip.replace(/^\[(.*)\]$/, '$1').replace(/%.*$/, '')
  if (isIPv4(address)) return address.split('.').map(Number)
  if (isIP(address) !== 6) return undefined
  const [head, tail] = address.includes('::') ? address.split('::') : [address, undefined]
  const groups = (part: string | undefined) =>
    (part ? part.split(':') : []).flatMap((group) => {
      if (!group.includes('.')) return [Number.parseInt(group, 16)]
      const [a, b, c, d] = group.split('.').map(Number)
      return [(a! << 8) | b!, (c! << 8) | d!]
    })
  const left = groups(head)
  const right = groups(tail)
  const words = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill(0), ...right]
  return words.flatMap((word) => [word >> 8, word & 0xff])
}
