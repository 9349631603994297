import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { Logger } from './logger.ts'

/**
 * Prometheus metrics at /metrics: process defaults plus a request histogram.
 * Returns the registry (labelled with the service) and the per-request observer, which the kit
 * calls from its one onResponse hook.
 */
export function installMetrics(
  app: FastifyInstance,
  service: string,
): { registry: Registry; observe: (request: FastifyRequest, reply: FastifyReply) => void } {
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
  const observe = (request: FastifyRequest, reply: FastifyReply) => {
    const route = request.routeOptions.url ?? 'unmatched'
    const key = `${request.method} ${reply.statusCode} ${route}`
    let child = children.get(key)
    if (!child) {
      child = duration.labels({ method: request.method, route, status: reply.statusCode })
      children.set(key, child)
    }
    child.observe(reply.elapsedTime / 1000)
  }
  return { registry, observe }
}

/** Each label's every value, declared up front: label values stay bounded, and each series exists (at 0) from the start. */
export type MetricLabels = Record<string, readonly string[]>
/** One value of each declared label. */
export type LabelValuesOf<L extends MetricLabels> = { [K in keyof L]: L[K][number] }

export interface MetricOptions<L extends MetricLabels> {
  name: string
  help: string
  labels?: L
}

export interface CounterMetric<L extends MetricLabels> {
  inc(labels: LabelValuesOf<L>, value?: number): void
}

export interface GaugeMetric<L extends MetricLabels> {
  set(labels: LabelValuesOf<L>, value: number): void
}

export interface GaugeOptions<L extends MetricLabels> extends MetricOptions<L> {
  /**
   * Runs at each scrape, to set the gauge from its source (a queue's depth, say). If it throws,
   * the gauge keeps its last value and the scrape still answers.
   */
  collect?(gauge: GaugeMetric<L>): void | Promise<void>
}

/** No labels: one series. */
type NoLabels = Record<never, never>

/**
 * A service's own metrics, on its process's /metrics (`ctx.metrics`), labelled with the service
 * like the kit's.
 */
export interface ServiceMetrics {
  counter<const L extends MetricLabels = NoLabels>(options: MetricOptions<L>): CounterMetric<L>
  gauge<const L extends MetricLabels = NoLabels>(options: GaugeOptions<L>): GaugeMetric<L>
}

/** Every combination of the declared label values (one empty set without labels). */
function combinations(labels: MetricLabels): Array<Record<string, string>> {
  return Object.entries(labels).reduce<Array<Record<string, string>>>(
    (sets, [name, values]) => sets.flatMap((set) => values.map((value) => ({ ...set, [name]: value }))),
    [{}],
  )
}

export function serviceMetrics(registry: Registry, log: Logger): ServiceMetrics {
  function counter<L extends MetricLabels>({ name, help, labels }: MetricOptions<L>): CounterMetric<L> {
    const metric = new Counter({ name, help, labelNames: Object.keys(labels ?? {}), registers: [registry] })
    // each series exists from the first scrape: rate() misses the first increment of a series that appears later
    for (const set of combinations(labels ?? {})) metric.inc(set, 0)
    return { inc: (values, value = 1) => metric.inc(values as Record<string, string>, value) }
  }

  function gauge<L extends MetricLabels>({ name, help, labels, collect }: GaugeOptions<L>): GaugeMetric<L> {
    const face: GaugeMetric<L> = { set: (values, value) => metric.set(values as Record<string, string>, value) }
    const metric: Gauge = new Gauge({
      name,
      help,
      labelNames: Object.keys(labels ?? {}),
      registers: [registry],
      // a source that fails leaves the last value: one metric's trouble must not fail the whole scrape
      collect: async () => {
        try {
          await collect?.(face)
        } catch (error) {
          log.warn({ err: error, metric: name }, 'metric not collected; its last value stays')
        }
      },
    })
    for (const set of combinations(labels ?? {})) metric.set(set, 0)
    return face
  }

  return { counter, gauge }
}
