import proxy from '@fastify/http-proxy'
import Fastify from 'fastify'

/**
 * The baseline: @fastify/http-proxy alone, no auth, no limits, no logging, same pool settings as the gateway.
 *
 * SHAPED=1 gives it the gateway's shape on a keyed request and none of its work (the "shape"
 * target): the same hooks, as no-ops of the same style (onRequest: two in callback style and one
 * async, as the address count, the body limit and the auth hook are; preParsing; onResponse),
 * four more response headers (three rate-limit ones and the request id) and five more headers to
 * the upstream (the identity the gateway forwards), with constant values. What it costs over the
 * bare proxy is what Fastify and Node charge for that shape, before any of the gateway's own code.
 */
const shaped = process.env.SHAPED === '1'
const app = Fastify()
if (shaped) {
  app.addHook('onRequest', (_request, _reply, done) => done())
  app.addHook('onRequest', (_request, _reply, done) => done())
  app.addHook('onRequest', async (_request, reply) => {
    reply.header('x-ratelimit-limit', 1000000000)
    reply.header('x-ratelimit-remaining', 999999999)
    reply.header('x-ratelimit-reset', 60)
  })
  app.addHook('preParsing', (_request, _reply, payload, done) => done(null, payload))
  app.addHook('onResponse', (_request, _reply, done) => done())
}
const identity = {
  'x-ats-internal-token': 'a-token-of-the-same-length-as-a-real-one-00',
  'x-ats-owner-id': 'key_0123456789abcdef',
  'x-ats-key-id': 'key_0123456789abcdef',
  'x-ats-key-tier': 'readonly',
}
await app.register(proxy, {
  upstream: process.env.UPSTREAM!,
  prefix: '/market',
  rewritePrefix: '/market',
  disableRequestLogging: true,
  undici: { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 },
  ...(shaped
    ? {
        replyOptions: {
          rewriteRequestHeaders: (request, headers) => ({ ...headers, ...identity, 'x-request-id': String(request.id) }),
          rewriteHeaders: (headers, request) => ({ ...headers, 'x-request-id': String(request?.id) }),
        },
      }
    : {}),
})
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`${address}\n`)
