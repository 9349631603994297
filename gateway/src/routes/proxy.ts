import proxy from '@fastify/http-proxy'
import type { IncomingHttpHeaders } from 'node:http'
import { generatedIdempotencyKey, identityHeaders } from '@ats/contracts'
import { errorBody, errorHandler, injectHttp, requestTraceContext, type ErrorFormat } from '@ats/service-kit'
import type { FastifyInstance, FastifyReply, FastifyRequest, RawServerBase } from 'fastify'
import { authHook, countFailedPayments, type AuthDeps } from '../auth/authHook.ts'
import { creditHeadersOf } from '../credit/creditGuard.ts'
import { routeTable, type RouteGroup, type UpstreamName } from '../routing/routeTable.ts'

export interface ProxyOptions {
  upstreams: Record<UpstreamName, string>
  internalToken: string
  timeoutMs: number
  /** the wait of longRunning groups (/v1 completions run a whole agent job) */
  longTimeoutMs: number
  /** the wait of spending groups (/swap/execute, /launchpad: receipts) */
  spendTimeoutMs: number
  /** connections to the service per route group (UPSTREAM_CONNECTIONS) */
  connections: number
  auth: AuthDeps
}

/**
 * Credentials and identity claims never pass the gateway as the client sent them. Nor does
 * `expect`: the gateway answered the 100-continue itself (bodyLimit.ts), and undici refuses it.
 * Nor a client's trace headers: the gateway starts every trace (tracing.ts), and sends its own.
 */
const droppedHeaders = [
  'authorization',
  'x-api-key',
  'x-payment',
  'payment-signature',
  'sign-in-with-x',
  'cookie',
  'expect',
  'traceparent',
  'tracestate',
]

function forwardedHeaders(request: FastifyRequest<any, RawServerBase>, headers: IncomingHttpHeaders, token: string): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {}
  for (const name in headers) {
    if (!name.startsWith('x-ats-') && !droppedHeaders.includes(name)) out[name] = headers[name]
  }
  out[identityHeaders.internalToken] = token
  out[identityHeaders.requestId] = request.id
  const { ownerId, keyId, tier, wallet, idempotencyKey } = request.identity ?? {}
  if (ownerId) out[identityHeaders.ownerId] = ownerId
  if (keyId) out[identityHeaders.keyId] = keyId
  if (tier) out[identityHeaders.tier] = tier
  if (wallet) out[identityHeaders.wallet] = wallet
  if (idempotencyKey) out[identityHeaders.idempotencyKey] = idempotencyKey
  // the verified payment of a paid request: the agent ties the job it starts to it, and ends the
  // job while the payment can still be settled (its validBefore)
  const paid = request.payment
  if (paid) {
    out[identityHeaders.payment] = `${paid.payer.toLowerCase()}:${paid.payment.authorization.nonce.toLowerCase()}`
    out[identityHeaders.paymentValidBefore] = paid.payment.authorization.validBefore.toString()
  }
  // the wallet whose credit pays (and the hold of metered work): the client's copies were dropped above
  Object.assign(out, creditHeadersOf(request))
  // the service's server span becomes a child of the gateway's
  const trace = requestTraceContext(request)
  if (trace) injectHttp(out, trace)
  return out
}

function upstreamFailed(service: UpstreamName, format: ErrorFormat) {
  return (reply: FastifyReply<any, RawServerBase>, { error }: { error: Error & { statusCode?: number } }) => {
    reply.request.log.warn({ err: error, service }, 'upstream failed')
    const status = error.statusCode === 504 ? 504 : 503
    const message = status === 504 ? `${service} service did not answer in time` : `${service} service unavailable`
    reply.code(status).send(format({ status, message, code: 'ATS_ERR_UNAVAILABLE' }))
  }
}

/**
 * A spend always runs under an idempotency key: the gateway makes one when the client sent none
 * and answers it on every reply, its own 504 included, so the client can retry without spending
 * twice (the service replays the first result for it; docs/trading.md).
 */
async function spendKey(request: FastifyRequest, reply: FastifyReply) {
  if (request.method !== 'POST') return
  request.headers['idempotency-key'] ??= generatedIdempotencyKey()
  const key = request.headers['idempotency-key']
  if (typeof key === 'string') reply.header('idempotency-key', key)
}

async function proxyGroup(app: FastifyInstance, group: RouteGroup, options: ProxyOptions) {
  const format = group.errors ?? errorBody
  if (group.errors) app.setErrorHandler(errorHandler(group.errors))
  const timeoutMs = group.longRunning ? options.longTimeoutMs : group.spending ? options.spendTimeoutMs : options.timeoutMs
  app.addHook('onRequest', authHook(group.auth, options.auth))
  if (group.spending) app.addHook('preHandler', spendKey)
  // a withdrawal is taken from the credit before admin pays it (the body says how much)
  if (group.auth.kind === 'credit' && options.auth.credit) app.addHook('preHandler', options.auth.credit.withdrawal)
  if (group.auth.kind === 'payment') {
    app.addHook('preHandler', options.auth.pay.preHandler)
    app.addHook('onSend', options.auth.pay.onSend)
    app.addHook('onSend', countFailedPayments(options.auth.failures))
  }
  await app.register(proxy, {
    upstream: options.upstreams[group.service],
    prefix: group.prefix,
    rewritePrefix: group.prefix,
    disableRequestLogging: true,
    // each group has its own pool; a body is read whole at the edge (bodyLimit.ts) before the
    // request takes one of these connections, so a slow client never holds one
    undici: {
      connections: options.connections,
      pipelining: 1,
      keepAliveTimeout: 60_000,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    },
    replyOptions: {
      rewriteRequestHeaders: (request, headers) => forwardedHeaders(request, headers, options.internalToken),
      // the client gets the id the gateway logged and forwarded, to quote when asking for help
      rewriteHeaders: (headers, request) => {
        headers[identityHeaders.requestId] = request?.id
        return headers
      },
      onError: upstreamFailed(group.service, format),
      retryDelay: () => null,
    },
  })
}

/** One proxy per route group of the table, each behind its own auth hook. */
export async function proxyRoutes(app: FastifyInstance, options: ProxyOptions) {
  for (const group of routeTable) {
    await app.register(async (scope) => proxyGroup(scope, group, options))
  }
}
