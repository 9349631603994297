import { readFile } from 'node:fs/promises'
import { scrapeMetric } from '@ats/service-kit/testing'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { adminKey, eventually, startAgentFleet } from '../fleet.ts'

/**
 * The Grafana dashboard (k8s/monitoring/grafana-dashboard.json) against what the fleet exports:
 * every metric a panel or variable queries is on some process's /metrics, and every route a
 * panel selects by name is one the fleet labels its requests with. A panel on a renamed metric
 * or route would otherwise stay empty without anyone noticing.
 */

interface Target {
  expr: string
  legendFormat?: string
}
interface Panel {
  type: string
  title: string
  targets?: Target[]
  panels?: Panel[]
}
interface Dashboard {
  title: string
  uid: string
  schemaVersion: number
  panels: Panel[]
  templating: { list: Array<{ name: string; type: string; query?: string | { query: string } }> }
}

// PromQL functions, aggregations and keywords: every other identifier outside label matchers is a metric
const promql = new Set([
  ...['sum', 'min', 'max', 'avg', 'count', 'stddev', 'stdvar', 'topk', 'bottomk', 'quantile', 'count_values', 'group'],
  ...['rate', 'irate', 'increase', 'delta', 'idelta', 'deriv', 'changes', 'resets', 'histogram_quantile', 'clamp_min', 'clamp_max'],
  ...['abs', 'ceil', 'floor', 'round', 'vector', 'scalar', 'time', 'label_replace', 'label_join', 'absent', 'sort', 'sort_desc'],
  ...['avg_over_time', 'max_over_time', 'min_over_time', 'sum_over_time', 'count_over_time', 'last_over_time', 'label_values'],
  ...['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'offset', 'bool', 'inf', 'nan'],
])

/** The metric names a PromQL expression reads: label matchers, grouping labels, ranges and Grafana variables removed first. */
function metricsOf(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\$\{?\w+\}?/g, ' ')
  return [...bare.matchAll(/(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)/g)].map((m) => m[1]!).filter((word) => !promql.has(word))
}

/** label_values(<selector>, label) reads the selector's metric; the label is not one. */
function variableMetrics(query: string): string[] {
  const selector = /^label_values\((.*),\s*\w+\s*\)$/.exec(query.trim())?.[1]
  return selector === undefined ? metricsOf(query) : metricsOf(selector)
}

/** The route label values a PromQL expression selects exactly (route="..."). */
const routesOf = (expr: string) => [...expr.matchAll(/\broute="([^"]+)"/g)].map((m) => m[1]!)

t.test('the Grafana dashboard queries metrics the fleet exports', async (t) => {
  const dashboard = JSON.parse(
    await readFile(new URL('../../../k8s/monitoring/grafana-dashboard.json', import.meta.url), 'utf8'),
  ) as Dashboard
  const panels = dashboard.panels.flatMap((panel) => [panel, ...(panel.panels ?? [])]).filter((panel) => panel.type !== 'row')
  const exprs = panels.flatMap((panel) => (panel.targets ?? []).map((target) => target.expr))
  const variables = dashboard.templating.list
    .filter((v) => v.type === 'query')
    .map((v) => (typeof v.query === 'string' ? v.query : v.query!.query))

  t.test('the metric extractor finds metrics and nothing else', async (t) => {
    t.same(
      metricsOf(
        'histogram_quantile(0.99, sum by (service, le) (rate(http_request_duration_seconds_bucket{route!~".*/events", service=~"$service"}[$__rate_interval])))',
      ),
      ['http_request_duration_seconds_bucket'],
    )
    t.same(metricsOf('sum(rate(a_total[5m])) / on (service) group_left sum(b) > 450 * 1024'), ['a_total', 'b'])
    t.same(variableMetrics('label_values(http_request_duration_seconds_count, service)'), ['http_request_duration_seconds_count'])
  })

  t.test('the dashboard is a Grafana dashboard on a Prometheus datasource variable', async (t) => {
    t.match(dashboard, { title: String, uid: /^[a-z0-9-]{1,40}$/, schemaVersion: Number })
    t.ok(
      dashboard.templating.list.some(
        (v) => v.name === 'datasource' && v.type === 'datasource' && (v as { query?: string }).query === 'prometheus',
      ),
    )
    t.ok(panels.length >= 10, `${panels.length} panels`)
    t.equal(new Set(panels.map((p) => p.title)).size, panels.length, 'panel titles are unique')
    for (const panel of panels) {
      t.match(panel, { title: /\w/, type: String }, panel.title)
      t.ok(
        panel.targets && panel.targets.length > 0 && panel.targets.every((target) => target.expr.trim() !== ''),
        `${panel.title} has a query`,
      )
    }
  })

  // The whole fleet, and a request of each kind the dashboard shows, so that their labelled series exist
  const fleet = await startAgentFleet(t, { automationEnv: {} })
  const { request, createKey, pay } = fleet
  const { key } = await createKey('readwrite')
  await request('/market/prices', { key })
  await request('/market/prices')
  await request('/swap/quote?tokenIn=USDC&tokenOut=ARB&amountIn=1000000', { key })
  const swapped = await request('/swap/execute', { method: 'POST', key, body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000' } })
  if (swapped.status !== 200) throw new Error(`the swap answered ${swapped.status} ${JSON.stringify(swapped.body)}`)
  await request('/agent/prompt', { method: 'POST', body: { prompt: 'What is the price of ARB?' } })
  const accepted = await request('/agent/prompt', {
    method: 'POST',
    body: { prompt: 'What is the price of ARB?' },
    headers: { 'x-payment': await pay() },
  })
  if (accepted.status !== 202) throw new Error(`the paid prompt answered ${accepted.status} ${JSON.stringify(accepted.body)}`)
  await request('/portfolio/jobs', { key })
  // an hourly buy for a key's own wallet: its first run is at once, a swap over NATS
  const wallet = privateKeyToAccount(generatePrivateKey()).address
  const buyer = await request('/admin/keys', {
    method: 'POST',
    key: adminKey,
    body: { tier: 'readwrite', label: 'dashboard buys', wallet },
  })
  const automation = await request('/automations', {
    method: 'POST',
    key: buyer.body.key,
    body: {
      walletAddress: wallet,
      type: 'recurring-buy',
      name: 'hourly ARB',
      config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1h' },
    },
  })
  if (automation.status !== 201) throw new Error(`the automation answered ${automation.status} ${JSON.stringify(automation.body)}`)
  // the paid job completes (its payment is in admin's ledger by then) and the buy's run ends, before the scrape
  await eventually(
    'the paid job, its payment and the first run of the buy',
    async () => {
      const [jobs, payments, runs] = await Promise.all([
        scrapeMetric(fleet.agent.url, 'ats_agent_jobs_total'),
        scrapeMetric(fleet.admin.url, 'ats_payments_total'),
        scrapeMetric(fleet.automations[0]!.url, 'ats_automation_runs_total'),
      ])
      return jobs.complete === 1 && payments.charged === 1 && runs.success === 1 ? true : undefined
    },
    30_000,
  )

  // every process but market-data (startAgentFleet keeps it to itself; it exports only the kit's
  // metrics, which the others export too); the gateway's /metrics is on its operations port
  const gateway = fleet.gateway as unknown as { opsUrl(): string }
  const processes = [gateway, fleet.admin, fleet.agent, fleet.tradings[0]!, fleet.automations[0]!]
  const exported = await Promise.all(processes.map(async (svc) => (await fetch(`${svc.opsUrl()}/metrics`)).text()))
  const names = new Set(exported.flatMap((text) => [...text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )/gm)].map((m) => m[1]!)))
  const routes = new Set(exported.flatMap((text) => [...text.matchAll(/\broute="([^"]+)"/g)].map((m) => m[1]!)))

  t.test('every metric the dashboard queries is exported by a running process', async (t) => {
    // up is the series Prometheus writes for each scrape, not one a process exports
    const used = new Set([...exprs.flatMap(metricsOf), ...variables.flatMap(variableMetrics)].filter((metric) => metric !== 'up'))
    t.ok(
      used.has('http_request_duration_seconds_bucket') && used.has('http_request_duration_seconds_count') && used.size >= 5,
      `metrics used: ${[...used].join(', ')}`,
    )
    for (const metric of used) t.ok(names.has(metric), `${metric} is exported`)
  })

  t.test("the fleet's own counters moved with the requests above: a paid job, a swap over HTTP and one over NATS", async (t) => {
    t.match(await scrapeMetric(fleet.admin.url, 'ats_payments_total'), { charged: 1, voided: 0 })
    t.match(await scrapeMetric(fleet.agent.url, 'ats_agent_jobs_total'), { pending: 1, complete: 1, failed: 0 })
    t.same(await scrapeMetric(fleet.agent.url, 'ats_agent_jobs_pending'), { '': 0 }, 'nothing left in the job queue')
    t.match(await scrapeMetric(fleet.tradings[0]!.url, 'ats_swaps_total'), { 'success,http': 1, 'success,nats': 1, 'error,http': 0 })
    t.match(await scrapeMetric(fleet.automations[0]!.url, 'ats_automation_runs_total'), { success: 1, failed: 0 })
  })

  t.test('every route a panel selects by name is one the fleet labels requests with', async (t) => {
    const selected = new Set(exprs.flatMap(routesOf))
    t.ok(selected.size >= 2, `routes selected: ${[...selected].join(', ')}`)
    for (const route of selected) t.ok(routes.has(route), `${route} is a route label`)
  })
})
