/**
 * Least privilege on NATS (docs/security.md): what each component of the fleet may publish and
 * subscribe to, generated from the contracts so it cannot drift from them.
 *
 * A component serves the endpoints its own contract declares (derived, never listed), and
 * declares below, by reference to the contracts' channels, what else it uses: the endpoints
 * it calls, the broadcasts it sends or hears, the JetStream streams it publishes to or
 * consumes from, the key-value buckets it reads or writes and the webhook events its
 * outbox emits. `natsPermissions` turns that into subjects; `natsAuthorization` into the
 * `authorization` block of a nats-server configuration, one user per component.
 */
import type { EventChannels, WebhookEventType } from './common/events.ts'
import type { Endpoint, Topic } from './common/messages.ts'
import { natsChannels, type NatsChannels, type serviceContracts } from './index.ts'

/** The deployables that connect to NATS; each gets its own NATS user (and Postgres role, if it has a database). */
export const fleetComponents = ['gateway', 'agent', 'trading', 'market-data', 'automation', 'admin'] as const
export type FleetComponent = (typeof fleetComponents)[number]

/** the component that serves a contract's endpoints: `market` is market-data's contract */
export const componentOfContract: Record<keyof typeof serviceContracts, FleetComponent> = {
  gateway: 'gateway',
  admin: 'admin',
  agent: 'agent',
  trading: 'trading',
  market: 'market-data',
  automation: 'automation',
}

interface StreamUse {
  stream: { name: string }
  /** subjects published into the stream (acked through the publisher's inbox) */
  publish?: string[]
  /** durable consumers pulled from (their acks go to $JS.ACK.<stream>.<durable>.>) */
  consume?: string[]
  /** reads single messages by sequence or subject (a stream's last message on a subject) */
  getMessages?: boolean
}

/** What a component uses beyond serving its own endpoints. */
export interface NatsUse {
  calls?: Endpoint<any, any>[]
  publishes?: Topic<any>[]
  subscribes?: Topic<any>[]
  streams?: StreamUse[]
  /** buckets it reads and watches (it may create a missing one: start order never matters) */
  reads?: string[]
  /** buckets it writes */
  writes?: string[]
  /** webhook events its outbox publishes to the events stream */
  emits?: WebhookEventType[]
}

const eventsStream = (events: EventChannels, consume?: string[]): StreamUse => ({
  stream: events.streamSpec,
  ...(consume ? { consume, publish: [events.deadLetters] } : {}),
})

/**
 * Who uses what, by component. A new call or stream in a service's code needs its line
 * here; test/permissions.test.ts finds the calls in the services' sources that are missing.
 */
export const natsUses: Record<FleetComponent, (c: NatsChannels) => NatsUse> = {
  gateway: ({ admin }) => ({
    calls: [admin.keyVerify, admin.creditSnapshot],
    subscribes: [admin.keyRevoked, admin.keyCreated],
    streams: [
      { stream: admin.payments.streamSpec, publish: [admin.payments.charged.subject] },
      {
        stream: admin.credit.streamSpec,
        publish: [admin.credit.debited.subject, admin.credit.usage.subject, admin.credit.deadLetters],
        consume: [admin.credit.adjustedConsumer],
      },
    ],
    reads: [admin.payments.blockedPayers],
  }),
  agent: ({ admin, agent, trading, market, automation }) => ({
    calls: [
      admin.agentPayer,
      admin.paymentsOfJobs,
      trading.quote,
      trading.execute,
      trading.approval,
      trading.approvalWithdraw,
      trading.prepare,
      trading.positions,
      trading.grants,
      trading.balance,
      trading.tokens,
      market.prices,
      market.trending,
      market.nfts,
      market.topPredictions,
      market.searchPredictions,
      market.bridgeQuote,
      market.bridgeChains,
      automation.create,
      automation.list,
      automation.setStatus,
    ],
    // the API process cancels, the worker running the job hears it; each job's events go to its SSE followers
    publishes: [agent.cancelled, agent.events('*')],
    subscribes: [agent.cancelled, agent.events('*')],
    streams: [
      // the API publishes jobs; workers pull them and hand back (republish) those they stop early
      { stream: agent.jobsStream, publish: [agent.jobs.subject], consume: [agent.workers] },
      { stream: admin.payments.streamSpec, publish: [admin.payments.jobOutcome.subject] },
      // what metered work paid by credit used (a /v1 completion, an agent job), for admin's ledger
      { stream: admin.credit.streamSpec, publish: [admin.credit.usage.subject] },
      eventsStream(admin.events),
    ],
    emits: ['job.completed', 'job.failed', 'job.cancelled', 'job.awaiting_approval'],
  }),
  trading: ({ admin }) => ({
    calls: [admin.keyPolicy, admin.agentPayer],
    streams: [eventsStream(admin.events)],
    reads: [admin.walletControl],
    emits: ['swap.confirmed'],
  }),
  'market-data': () => ({}),
  automation: ({ admin, trading, market }) => ({
    calls: [
      admin.keyPolicy,
      admin.agentPayer,
      trading.quote,
      trading.execute,
      trading.approval,
      trading.approvalWithdraw,
      trading.tokens,
      market.prices,
    ],
    streams: [eventsStream(admin.events)],
    reads: [admin.walletControl],
    emits: ['automation.run.succeeded', 'automation.run.failed', 'automation.completed'],
  }),
  admin: ({ admin }) => ({
    publishes: [admin.keyRevoked, admin.keyCreated],
    streams: [
      {
        stream: admin.payments.streamSpec,
        consume: [admin.payments.ledgerConsumer, admin.payments.jobOutcomeConsumer],
        publish: [admin.payments.deadLetters],
      },
      eventsStream(admin.events, [admin.events.webhookConsumer]),
      {
        stream: admin.credit.streamSpec,
        consume: [admin.credit.debitConsumer, admin.credit.usageConsumer],
        publish: [admin.credit.adjusted.subject, admin.credit.deadLetters],
        // the snapshot waits for the last debit on the stream to be recorded (credit/snapshot.ts)
        getMessages: true,
      },
    ],
    reads: [admin.payments.blockedPayers, admin.walletControl],
    writes: [admin.payments.blockedPayers, admin.walletControl],
    emits: ['payment.settled', 'payment.voided', 'credit.topped_up', 'credit.low'],
  }),
}

export interface NatsPermissions {
  publish: string[]
  subscribe: string[]
}

const isEndpoint = (v: unknown): v is Endpoint<unknown, unknown> =>
  typeof v === 'object' && v !== null && 'subject' in v && 'request' in v && 'reply' in v

/** The endpoints a contract's channels declare (nested groups included). */
export function endpointsOf(channels: unknown): Endpoint<unknown, unknown>[] {
  if (isEndpoint(channels)) return [channels]
  if (typeof channels !== 'object' || channels === null) return []
  return Object.values(channels).flatMap(endpointsOf)
}

/** the endpoints a component serves: those of its own contract */
export function servedEndpoints(component: FleetComponent, channels: NatsChannels): Endpoint<unknown, unknown>[] {
  const [contract] = Object.entries(componentOfContract).find(([, served]) => served === component) ?? []
  return contract ? endpointsOf(channels[contract as keyof NatsChannels]) : []
}

/** JetStream API subjects for one stream, scoped to it: info, create and update (every user ensures what it uses exists). */
const streamApi = (stream: string) => ['$JS.API.STREAM.INFO', '$JS.API.STREAM.CREATE', '$JS.API.STREAM.UPDATE'].map((s) => `${s}.${stream}`)

/** what pulling from a durable consumer takes: creating it, reading its lag, fetching, acking */
const consumerApi = (stream: string, durable: string) => [
  `$JS.API.CONSUMER.CREATE.${stream}.${durable}`,
  `$JS.API.CONSUMER.CREATE.${stream}.${durable}.>`,
  `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.${durable}`,
  `$JS.API.CONSUMER.INFO.${stream}.${durable}`,
  `$JS.API.CONSUMER.MSG.NEXT.${stream}.${durable}`,
  `$JS.ACK.${stream}.${durable}.>`,
]

/**
 * A bucket read through nats.js: its stream's info (and creation when missing), direct and
 * stream gets, and the ordered consumers of watch() and keys(), each with its own generated
 * name (so `CONSUMER.*.KV_<bucket>.>`), flow control replies included.
 */
const bucketRead = (bucket: string) => {
  const stream = `KV_${bucket}`
  return [
    ...streamApi(stream),
    `$JS.API.DIRECT.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}.>`,
    `$JS.API.STREAM.MSG.GET.${stream}`,
    `$JS.API.CONSUMER.CREATE.${stream}`,
    `$JS.API.CONSUMER.CREATE.${stream}.>`,
    `$JS.API.CONSUMER.INFO.${stream}.>`,
    `$JS.API.CONSUMER.DELETE.${stream}.>`,
    `$JS.FC.${stream}.>`,
  ]
}

/** The subjects one component may publish and subscribe to, in one namespace. */
export function natsPermissions(component: FleetComponent, namespace: string): NatsPermissions {
  const channels = natsChannels(namespace)
  const use = natsUses[component](channels)
  const publish = new Set<string>()
  // replies to its own requests, JetStream acks and fetched messages all arrive in its inbox
  const subscribe = new Set<string>(['_INBOX.>'])
  const served = servedEndpoints(component, channels)
  for (const e of served) subscribe.add(e.subject)
  // the NATS services API answers discovery (PING, INFO, STATS) for a service that serves endpoints
  if (served.length > 0) subscribe.add('$SRV.>')
  for (const e of use.calls ?? []) publish.add(e.subject)
  for (const t of use.publishes ?? []) publish.add(t.subject)
  for (const t of use.subscribes ?? []) subscribe.add(t.subject)
  const streams = use.streams ?? []
  const events = channels.admin.events
  for (const type of use.emits ?? []) publish.add(events.subjectOf(type))
  // the account's JetStream info: jetstreamManager() asks it first
  if (streams.length > 0 || use.reads?.length || use.writes?.length) publish.add('$JS.API.INFO')
  for (const s of streams) {
    for (const subject of streamApi(s.stream.name)) publish.add(subject)
    for (const subject of s.publish ?? []) publish.add(subject)
    for (const durable of s.consume ?? []) for (const subject of consumerApi(s.stream.name, durable)) publish.add(subject)
    if (s.getMessages) publish.add(`$JS.API.STREAM.MSG.GET.${s.stream.name}`)
    // a consumer hands a message back by publishing it again on its own subject (workers.ts)
    if (s.consume) for (const subject of s.publish ?? []) publish.add(subject)
  }
  for (const bucket of new Set([...(use.reads ?? []), ...(use.writes ?? [])]))
    for (const subject of bucketRead(bucket)) publish.add(subject)
  for (const bucket of use.writes ?? []) publish.add(`$KV.${bucket}.>`)
  return { publish: [...publish].sort(), subscribe: [...subscribe].sort() }
}

/** `ATS_NATS_PASSWORD_MARKET_DATA`: the environment variable nats-server reads a component's password from. */
const natsPasswordVariable = (component: FleetComponent) => `ATS_NATS_PASSWORD_${component.toUpperCase().replace(/-/g, '_')}`

/** the NATS user of a component: its name (per namespace when `userPrefix` is set) */
export const natsUserOf = (component: FleetComponent, userPrefix = '') => `${userPrefix}${component}`

export interface NatsAuthorizationOptions {
  namespace: string
  /** put before each user name (two fleets on one server need distinct users) */
  userPrefix?: string
  /**
   * each component's password; unset: a reference to its environment variable
   * (natsPasswordVariable), which nats-server resolves when it reads the file
   */
  passwords?: Partial<Record<FleetComponent, string>>
  /** more users, with every permission (a test harness, an operator's tools) */
  unrestricted?: Array<{ user: string; password: string }>
}

const quote = (s: string) => JSON.stringify(s)
const list = (subjects: string[], indent: string) => `[\n${subjects.map((s) => `${indent}  ${quote(s)}`).join(',\n')}\n${indent}]`

/**
 * The `authorization { users = [...] }` block of a nats-server configuration: one user per
 * component with exactly its permissions. `allow_responses` lets a server answer the
 * requests it received (their reply subjects) and nothing else.
 */
export function natsAuthorization({ namespace, userPrefix = '', passwords, unrestricted = [] }: NatsAuthorizationOptions): string {
  const users = fleetComponents.map((component) => {
    const { publish, subscribe } = natsPermissions(component, namespace)
    const password = passwords?.[component] === undefined ? `$${natsPasswordVariable(component)}` : quote(passwords[component]!)
    return [
      `    # ${component}`,
      '    {',
      `      user: ${quote(natsUserOf(component, userPrefix))}`,
      `      password: ${password}`,
      '      permissions: {',
      `        publish: { allow: ${list(publish, '        ')} }`,
      `        subscribe: { allow: ${list(subscribe, '        ')} }`,
      '        allow_responses: true',
      '      }',
      '    }',
    ].join('\n')
  })
  for (const { user, password } of unrestricted) users.push(`    { user: ${quote(user)}, password: ${quote(password)} }`)
  return [
    `# Generated from packages/contracts (src/permissions.ts) for the namespace "${namespace}": do not edit.`,
    '# One NATS user per component, allowed exactly the subjects its contract declares (docs/security.md).',
    'authorization {',
    '  users = [',
    users.join('\n'),
    '  ]',
    '}',
    '',
  ].join('\n')
}

/** Whether a NATS subject matches a permission pattern (`*` one token, `>` the rest). */
export function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split('.')
  const s = subject.split('.')
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '>') return s.length > i
    if (i >= s.length || (p[i] !== '*' && p[i] !== s[i])) return false
  }
  return p.length === s.length
}
