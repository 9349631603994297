import proxy from '@fastify/http-proxy'
import type { IncomingHttpHeaders } from 'node:http'
import { identityHeaders } from '@ats/contracts'
import type { FastifyInstance, FastifyReply, FastifyRequest, RawServerBase } from 'fastify'
import { authHook, type AuthDeps } from '../auth/authHook.ts'
import { routeTable, type RouteGroup, type UpstreamName } from '../routing/routeTable.ts'

export interface ProxyOptions {
  upstreams: Record<UpstreamName, string>
  internalToken: string
  timeoutMs: number
  auth: AuthDeps
}

/** Credentials and identity claims never pass the gateway as the client sent them. */
const droppedHeaders = ['authorization', 'x-payment', 'payment-signature', 'cookie']

function forwardedHeaders(request: FastifyRequest<any, RawServerBase>, headers: IncomingHttpHeaders, token: string): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {}
  for (const name in headers) {
    if (!name.startsWith('x-ats-') && !droppedHeaders.includes(name)) out[name] = headers[name]
  }
  out[identityHeaders.internalToken] = token
  out[identityHeaders.requestId] = request.id
  const { ownerId, keyId, tier, wallet } = request.identity ?? {}
  if (ownerId) out[identityHeaders.ownerId] = ownerId
  if (keyId) out[identityHeaders.keyId] = keyId
  if (tier) out[identityHeaders.tier] = tier
  if (wallet) out[identityHeaders.wallet] = wallet
  return out
}

function upstreamFailed(service: UpstreamName) {
  return (reply: FastifyReply<any, RawServerBase>, { error }: { error: Error & { statusCode?: number } }) => {
    reply.request.log.warn({ err: error, service }, 'upstream failed')
    const timedOut = error.statusCode === 504
    reply
      .code(timedOut ? 504 : 503)
      .send({ error: timedOut ? `${service} service did not answer in time` : `${service} service unavailable` })
  }
}

async function proxyGroup(app: FastifyInstance, group: RouteGroup, options: ProxyOptions) {
  app.addHook('onRequest', authHook(group.auth, options.auth))
  if (group.auth.kind === 'payment') app.addHook('onSend', options.auth.pay.onSend)
  await app.register(proxy, {
    upstream: options.upstreams[group.service],
    prefix: group.prefix,
    rewritePrefix: group.prefix,
    disableRequestLogging: true,
    undici: { connections: 128, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: options.timeoutMs, bodyTimeout: options.timeoutMs },
    replyOptions: {
      rewriteRequestHeaders: (request, headers) => forwardedHeaders(request, headers, options.internalToken),
      // the client gets the id the gateway logged and forwarded, to quote when asking for help
      rewriteHeaders: (headers, request) => {
        headers[identityHeaders.requestId] = request?.id
        return headers
      },
      onError: upstreamFailed(group.service),
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
