import { Histogram, type Metric, Registry } from 'prom-client'
import t from 'tap'
import { RequestHistogram } from '../src/metrics.ts'

const bounds = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]

/** prom-client's Histogram and ours, each in a registry of its own labelled as a service's is */
function bothHistograms() {
  const reference = new Registry()
  reference.setDefaultLabels({ service: 'gateway' })
  const theirs = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP requests by route and status',
    labelNames: ['method', 'route', 'status'],
    buckets: bounds,
    registers: [reference],
  })
  const ours = new Registry()
  ours.setDefaultLabels({ service: 'gateway' })
  const histogram = new RequestHistogram(bounds)
  ours.registerMetric(histogram as unknown as Metric)
  return { reference, theirs, ours, histogram }
}

t.test("the hand-kept request histogram renders exactly as prom-client's own Histogram", async (t) => {
  const { reference, theirs, ours, histogram } = bothHistograms()

  // on the bounds, between them, past the largest, and a route label that needs escaping
  const observations: [string, string, number, number][] = [
    ['GET', '/market/prices', 200, 0.001],
    ['GET', '/market/prices', 200, 0.0011],
    ['GET', '/market/prices', 200, 3],
    ['POST', '/swap/execute', 402, 0.3],
    ['GET', 'unmatched', 404, 0.00001],
    ['GET', '/a"b\\c', 200, 2.5],
  ]
  for (const [method, route, status, seconds] of observations) {
    theirs.labels({ method, route, status }).observe(seconds)
    histogram.observe(method, route, status, seconds)
  }
  const text = await ours.metrics()
  t.equal(text, await reference.metrics())
  t.match(
    text,
    /http_request_duration_seconds_bucket\{le="0.001",service="gateway",method="GET",route="\/market\/prices",status="200"\} 1\n/,
  )
  t.match(text, /http_request_duration_seconds_count\{service="gateway",method="GET",route="\/market\/prices",status="200"\} 3\n/)

  histogram.reset()
  theirs.reset()
  t.equal(await ours.metrics(), await reference.metrics(), 'reset empties it as it does theirs')
})

t.test('its JSON (registry.getMetricsAsJSON) holds the same values as prom-client gives', async (t) => {
  const { reference, theirs, ours, histogram } = bothHistograms()
  theirs.labels({ method: 'GET', route: '/x', status: 200 }).observe(0.02)
  histogram.observe('GET', '/x', 200, 0.02)
  const [a] = await ours.getMetricsAsJSON()
  const [b] = await reference.getMetricsAsJSON()
  // (prom-client also carries exemplars, null here: not kept)
  t.same(
    a!.values,
    (b!.values as { exemplar?: unknown }[]).map(({ exemplar: _, ...value }) => value),
  )
})
