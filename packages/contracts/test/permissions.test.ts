// The generated NATS permissions against the contracts and the services' code:
// a channel added to a contract, or a call added to a service, without its permission fails here.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { natsChannels, serviceContracts, webhookEventTypes } from '../src/index.ts'
import {
  componentOfContract,
  endpointsOf,
  fleetComponents,
  natsAuthorization,
  natsPermissions,
  natsUses,
  subjectMatches,
  type FleetComponent,
} from '../src/permissions.ts'

const namespace = 'ats'
const channels = natsChannels(namespace)
const permissions = Object.fromEntries(fleetComponents.map((c) => [c, natsPermissions(c, namespace)])) as Record<
  FleetComponent,
  ReturnType<typeof natsPermissions>
>
const may = (patterns: string[], subject: string) => patterns.some((p) => subjectMatches(p, subject))
const contracts = Object.keys(serviceContracts) as Array<keyof typeof serviceContracts>

t.test('subject patterns match as nats-server matches them', async (t) => {
  t.ok(subjectMatches('ats.events.>', 'ats.events.job.completed'))
  t.notOk(subjectMatches('ats.events.>', 'ats.events'))
  t.ok(subjectMatches('ats.agent.events.*', 'ats.agent.events.job_1'))
  t.notOk(subjectMatches('ats.agent.events.*', 'ats.agent.events.job_1.x'))
  t.notOk(subjectMatches('ats.trading.swap.quote', 'ats.trading.swap.execute'))
})

t.test('every endpoint a contract declares is served by its component, and only it subscribes to it', async (t) => {
  for (const contract of contracts) {
    for (const endpoint of endpointsOf(channels[contract])) {
      const owner = componentOfContract[contract]
      t.ok(may(permissions[owner].subscribe, endpoint.subject), `${owner} may serve ${endpoint.subject}`)
      for (const other of fleetComponents.filter((c) => c !== owner)) {
        t.notOk(may(permissions[other].subscribe, endpoint.subject), `${other} may not serve ${endpoint.subject}`)
      }
    }
  }
})

t.test('every stream, consumer, bucket, topic and event type is somebody’s, and each event type one emitter’s', async (t) => {
  const { admin, agent } = channels
  const streams = [admin.payments.streamSpec.name, admin.events.streamSpec.name, agent.jobsStream.name]
  for (const stream of streams)
    t.ok(
      fleetComponents.some((c) => may(permissions[c].publish, `$JS.API.STREAM.INFO.${stream}`)),
      `${stream} is used`,
    )
  for (const bucket of [admin.payments.blockedPayers, admin.walletControl]) {
    t.ok(
      fleetComponents.some((c) => may(permissions[c].publish, `$KV.${bucket}.x`)),
      `${bucket} is written by someone`,
    )
  }
  const consumers: Array<[string, string]> = [
    [admin.payments.streamSpec.name, admin.payments.ledgerConsumer],
    [admin.payments.streamSpec.name, admin.payments.jobOutcomeConsumer],
    [admin.events.streamSpec.name, admin.events.webhookConsumer],
    [agent.jobsStream.name, agent.workers],
  ]
  for (const [stream, durable] of consumers)
    t.ok(
      fleetComponents.some((c) => may(permissions[c].publish, `$JS.API.CONSUMER.MSG.NEXT.${stream}.${durable}`)),
      `${durable} is pulled`,
    )
  for (const topic of [admin.keyRevoked, agent.cancelled, admin.payments.charged, admin.payments.jobOutcome, agent.jobs]) {
    t.ok(
      fleetComponents.some((c) => may(permissions[c].publish, topic.subject)),
      `${topic.subject} has a publisher`,
    )
  }
  for (const type of webhookEventTypes) {
    const emitters = fleetComponents.filter((c) => may(permissions[c].publish, admin.events.subjectOf(type)))
    t.equal(emitters.length, 1, `${type} is emitted by exactly one component (${emitters.join(', ')})`)
  }
})

t.test('a component may not call what it does not declare: market-data calls nothing, the gateway only key lookups', async (t) => {
  t.notOk(may(permissions['market-data'].publish, channels.trading.execute.subject))
  t.notOk(may(permissions.gateway.publish, channels.trading.execute.subject))
  t.notOk(may(permissions.trading.publish, channels.trading.execute.subject), 'not even its own endpoint')
  t.ok(may(permissions.agent.publish, channels.trading.execute.subject))
  t.ok(may(permissions.automation.publish, channels.trading.execute.subject))
  t.same(natsUses['market-data'](channels), {})
  // the subjects of the whole namespace are never granted wholesale
  for (const c of fleetComponents)
    for (const p of [...permissions[c].publish, ...permissions[c].subscribe])
      t.notOk(['>', `${namespace}.>`, '$JS.API.>'].includes(p), `${c}: ${p}`)
})

/** Every channel a service's source names (`channels.trading.execute`, `const { quote } = channels.trading`). */
function channelsNamedIn(dir: string): Array<[keyof typeof serviceContracts, string]> {
  const found: Array<[keyof typeof serviceContracts, string]> = []
  const walk = (path: string) => {
    for (const entry of readdirSync(path)) {
      const full = join(path, entry)
      if (statSync(full).isDirectory()) walk(full)
      else if (full.endsWith('.ts')) {
        const source = readFileSync(full, 'utf8')
        for (const m of source.matchAll(/channels\.(\w+)\.(\w+)/g)) found.push([m[1] as keyof typeof serviceContracts, m[2]!])
        for (const m of source.matchAll(/\{([^{}]+)\}\s*=\s*(?:\w+\.)?channels\.(\w+)\b(?!\.)/g)) {
          for (const name of m[1]!.split(',')) found.push([m[2] as keyof typeof serviceContracts, name.split(':')[0]!.trim()])
        }
      }
    }
  }
  walk(dir)
  return found.filter(([contract]) => contract in serviceContracts)
}

t.test("every endpoint a service's code calls is allowed to it (a new call without its line in natsUses fails)", async (t) => {
  const repo = fileURLToPath(new URL('../../../', import.meta.url))
  const dirs: Record<FleetComponent, string> = {
    gateway: 'gateway/src',
    agent: 'services/agent/src',
    trading: 'services/trading/src',
    'market-data': 'services/market-data/src',
    automation: 'services/automation/src',
    admin: 'services/admin/src',
  }
  for (const component of fleetComponents) {
    const named = channelsNamedIn(join(repo, dirs[component]))
    t.ok(named.length > 0, `${component}: channels found in its code`)
    // the scan sees how the code names channels: every request/reply endpoint a service owns is among them
    for (const contract of contracts.filter((c) => componentOfContract[c] === component)) {
      const own = Object.entries(channels[contract] as Record<string, unknown>)
        .filter(([, channel]) => endpointsOf(channel).length === 1 && 'reply' in (channel as object))
        .map(([name]) => name)
      const seen = new Set(named.filter(([c]) => c === contract).map(([, name]) => name))
      t.same(
        own.filter((name) => !seen.has(name)),
        [],
        `${component}: the scan finds every endpoint of channels.${contract} in its code`,
      )
    }
    for (const [contract, name] of named) {
      const channel = (channels[contract] as Record<string, unknown>)[name]
      const [endpoint] = endpointsOf(channel)
      if (!endpoint || endpointsOf(channel).length !== 1) continue
      if (componentOfContract[contract] === component) {
        t.ok(may(permissions[component].subscribe, endpoint.subject), `${component} serves ${endpoint.subject}`)
      } else {
        t.ok(
          may(permissions[component].publish, endpoint.subject),
          `${component} may call ${endpoint.subject} (channels.${contract}.${name})`,
        )
      }
    }
  }
})

t.test('the nats-server authorization block: one user per component, passwords as given or as variables', async (t) => {
  const withVariables = natsAuthorization({ namespace })
  for (const c of fleetComponents) t.match(withVariables, `user: "${c}"`)
  t.match(withVariables, 'password: $ATS_NATS_PASSWORD_MARKET_DATA')
  const literal = natsAuthorization({
    namespace,
    userPrefix: 'x-',
    passwords: { trading: 'p"w' },
    unrestricted: [{ user: 'ops', password: 'o' }],
  })
  t.match(literal, 'user: "x-trading"')
  t.match(literal, 'password: "p\\"w"')
  t.match(literal, '{ user: "ops", password: "o" }')
})
