import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Counter, Gauge, type Metric, Registry, collectDefaultMetrics } from 'prom-client'
import type { Logger } from './logger.ts'

/**
 * Prometheus metrics at /metrics: process defaults plus a request histogram.
 * Returns the registry (labelled with the service) and the per-request observer, which the kit
 * calls from its one onResponse hook.
 */
export function installMetrics(app: FastifyInstance, service: string) {
  const registry = new Registry()
  registry.setDefaultLabels({ service })
  collectDefaultMetrics({ register: registry })
  const duration = new RequestHistogram([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5])
  registry.registerMetric(duration as unknown as Metric)
  app.get('/metrics', { logLevel: 'warn' }, async (_request, reply) => {
    reply.type(registry.contentType)
    return registry.metrics()
  })
  const observe = (request: FastifyRequest, reply: FastifyReply) =>
    duration.observe(request.method, request.routeOptions.url ?? 'unmatched', reply.statusCode, reply.elapsedTime / 1000)
  return { registry, observe }
}

interface HistogramValue {
  labels: Record<string, string | number>
  sharedLabels: Series['labels']
  value: number
  metricName: string
}

interface Series {
  labels: { method: string; route: string; status: number }
  /** observations per bucket (not cumulative), the last one past the largest bound (+Inf) */
  counts: number[]
  sum: number
  count: number
}

/**
 * http_request_duration_seconds, kept by hand and rendered by the registry like prom-client's
 * own Histogram (same name, labels, buckets and lines). prom-client's Histogram converts,
 * validates and hashes the label object on every observation, even through a labelled child:
 * ~2% of the gateway's CPU on the keyed route. Here an observation is one Map
 * lookup, a scan of ten bounds and three additions. Bounded: routes are the declared ones
 * (anything else is 'unmatched') and statuses are few.
 */
export class RequestHistogram {
  readonly name = 'http_request_duration_seconds'
  readonly help = 'HTTP requests by route and status'
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  private readonly series = new Map<string, Series>()
  constructor(private readonly bounds: readonly number[]) {}

  observe(method: string, route: string, status: number, seconds: number): void {
    const key = `${method} ${status} ${route}`
    let series = this.series.get(key)
    if (!series) {
      series = { labels: { method, route, status }, counts: new Array(this.bounds.length + 1).fill(0), sum: 0, count: 0 }
      this.series.set(key, series)
    }
    let i = 0
    while (i < this.bounds.length && seconds > this.bounds[i]!) i++
    series.counts[i]!++
    series.sum += seconds
    series.count++
  }

  /**
   * What the registry renders, in prom-client's own shape: per series the cumulative buckets
   * (`le` first, the series' labels shared), then _sum and _count.
   */
  getForPromString() {
    const values: HistogramValue[] = []
    for (const { labels, counts, sum, count } of this.series.values()) {
      let cumulative = 0
      for (let i = 0; i <= this.bounds.length; i++) {
        cumulative += counts[i]!
        values.push({
          labels: { le: this.bounds[i] ?? '+Inf' },
          sharedLabels: labels,
          value: cumulative,
          metricName: `${this.name}_bucket`,
        })
      }
      values.push({ labels: {}, sharedLabels: labels, value: sum, metricName: `${this.name}_sum` })
      values.push({ labels: {}, sharedLabels: labels, value: count, metricName: `${this.name}_count` })
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator }
  }

  /** the same values with each series' labels merged in, as prom-client's get() gives them (the registry's JSON) */
  get() {
    const data = this.getForPromString()
    return {
      ...data,
      values: data.values.map(({ labels, sharedLabels, ...rest }) => ({ ...rest, labels: { ...labels, ...sharedLabels } })),
    }
  }

  reset(): void {
    this.series.clear()
  }
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
