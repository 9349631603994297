import { readFile } from 'node:fs/promises'
import { createService } from '@ats/service-kit'
import { baseTestEnv } from '@ats/service-kit/testing'
import t from 'tap'
import { parse } from 'yaml'
import { gatewayService } from '../src/service.ts'

interface Rule {
  alert: string
  expr: string
  for?: string
  labels: { severity: string }
  annotations: { summary: string }
}

// PromQL words that are not metric names
const promql = new Set(['sum', 'by', 'rate', 'max', 'histogram_quantile', 'changes', 'up', 'le', 'service', 'instance', 'job', 'route', 'status', 'without', 'on', 'and', 'or'])

t.test('the alert rules are valid rule groups, and every metric they use is exported', async (t) => {
  const file = await readFile(new URL('../../k8s/monitoring/prometheus-rules.yaml', import.meta.url), 'utf8')
  const { groups } = parse(file) as { groups: Array<{ name: string; rules: Rule[] }> }
  t.ok(groups.length > 0)
  const rules = groups.flatMap((g) => g.rules)
  t.equal(new Set(rules.map((r) => r.alert)).size, rules.length, 'alert names are unique')
  for (const rule of rules) {
    t.match(rule, { alert: /^[A-Z][A-Za-z]+$/, expr: String, labels: { severity: /^(page|ticket)$/ }, annotations: { summary: String } }, rule.alert)
    if (rule.for) t.match(rule.for, /^[0-9]+[smh]$/, `${rule.alert} for`)
  }
  const gateway = await createService(gatewayService, await baseTestEnv(t))
  t.teardown(() => gateway.close())
  await gateway.app.inject({ url: '/health' })
  const exported = (await gateway.ops.inject({ url: '/metrics' })).body
  const names = new Set([...exported.matchAll(/^([a-z_:][a-z0-9_:]*)(?:\{| )/gm)].map((m) => m[1]!))
  const used = new Set(
    rules.flatMap((r) =>
      [...r.expr.replace(/"[^"]*"/g, '').replace(/\{[^}]*\}/g, ' ').matchAll(/\b([a-z_][a-z0-9_]*)\b/g)].map((m) => m[1]!).filter((w) => !promql.has(w) && /_/.test(w)),
    ),
  )
  t.ok(used.size >= 4, `metrics used: ${[...used].join(', ')}`)
  for (const metric of used) t.ok(names.has(metric), `${metric} is exported`)
})
