import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Histogram, Registry, collectDefaultMetrics } from 'prom-client'

/**
 * Prometheus metrics at /metrics: process defaults plus a request histogram.
 * Returns the per-request observer, which the kit calls from its one onResponse hook.
 */
export function installMetrics(app: FastifyInstance, service: string): (request: FastifyRequest, reply: FastifyReply) => void {
  const registry = new Registry()
  registry.setDefaultLabels({ service })
  collectDefaultMetrics({ register: registry })
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP requests by route and status',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  })
  app.get('/metrics', { logLevel: 'warn' }, async (_request, reply) => {
    reply.type(registry.contentType)
    return registry.metrics()
  })
  // one labelled child per (method, route, status), kept: prom-client otherwise sorts and hashes
  // the label object on every observation, a measurable share of the gateway's hot path (issue 26).
  // Bounded: routes are the declared ones (anything else is 'unmatched') and statuses are few.
  const children = new Map<string, { observe(seconds: number): void }>()
  return (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched'
    const key = `${request.method} ${reply.statusCode} ${route}`
    let child = children.get(key)
    if (!child) {
      child = duration.labels({ method: request.method, route, status: reply.statusCode })
      children.set(key, child)
    }
    child.observe(reply.elapsedTime / 1000)
  }
}
