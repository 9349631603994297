import proxy from '@fastify/http-proxy'
import Fastify from 'fastify'

/** The baseline: @fastify/http-proxy alone, no auth, no limits, no logging, same pool settings as the gateway. */
const app = Fastify()
await app.register(proxy, {
  upstream: process.env.UPSTREAM!,
  prefix: '/market',
  rewritePrefix: '/market',
  disableRequestLogging: true,
  undici: { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 },
})
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`${address}\n`)
