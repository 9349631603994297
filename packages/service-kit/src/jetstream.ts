import { StartupError } from './config.ts'
import {
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  nanos,
  type JetStreamClient,
  type JetStreamManager,
  type JetStreamPublishOptions,
  type KV,
  type NatsConnection,
  type PubAck,
} from 'nats'
import { SpanKind, inSpan, injectNats, tracingEnabled, type SpanSpec } from './tracing.ts'

export interface StreamSpec {
  name: string
  subjects: string[]
  /** how long messages are kept (ms) */
  maxAgeMs: number
  /** publishes with the same message id within this window are stored once (ms) */
  duplicateWindowMs: number
  /** limits (default): kept until too old; workqueue: a message is gone once acked (one consumer per subject) */
  retention?: 'limits' | 'workqueue'
}

/**
 * How many NATS servers keep a copy of each stream, consumer and bucket made through this
 * connection (JETSTREAM_REPLICAS; 1 until set). It belongs to the connection, set once by
 * createService right after connecting, rather than passed to every factory that opens a
 * stream (a dozen, in the kit and the services): it is a property of the NATS deployment
 * the connection reaches, the same for everything a process creates there. Keyed by the
 * connection, not a module variable, so one test process can talk to a single server and
 * to a cluster. The kit's durable consumers are given the same count (workers.ts).
 */
const replicasOf = new WeakMap<NatsConnection, number>()

export function setJetStreamReplicas(nc: NatsConnection, replicas: number): void {
  replicasOf.set(nc, replicas)
}

export const jetStreamReplicas = (nc: NatsConnection): number => replicasOf.get(nc) ?? 1

/** A replica count NATS cannot place (a single server, or fewer servers up than copies) as the setting to fix. */
function replicasProblem(error: Error, replicas: number): Error {
  if (replicas === 1 || !/non-clustered|insufficient resources/i.test(error.message)) return error
  return new StartupError(
    `NATS cannot keep ${replicas} copies of a stream (${error.message}): JETSTREAM_REPLICAS must be at most the number of servers in the NATS cluster, and that many must be up`,
  )
}

/**
 * Creates the stream, or brings an existing one to this spec. Every process that
 * publishes or consumes calls it at start, so the order in which they start never matters.
 */
export async function ensureStream(nc: NatsConnection, spec: StreamSpec): Promise<JetStreamManager> {
  const jsm = await nc.jetstreamManager().catch((error: Error) => {
    throw new StartupError(`NATS has no JetStream (${error.message}): start nats-server with -js`)
  })
  const config = {
    name: spec.name,
    subjects: spec.subjects,
    retention: spec.retention === 'workqueue' ? RetentionPolicy.Workqueue : RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(spec.maxAgeMs),
    duplicate_window: nanos(spec.duplicateWindowMs),
    // a changed count is applied by the update below: the cluster adds or drops copies
    num_replicas: jetStreamReplicas(nc),
  }
  try {
    await jsm.streams.info(spec.name)
    await jsm.streams.update(spec.name, config)
  } catch (error) {
    if (!/stream not found/i.test((error as Error).message)) throw replicasProblem(error as Error, config.num_replicas)
    await jsm.streams.add(config).catch(async (addError: Error) => {
      // another replica created it in between
      if (!/already in use/i.test(addError.message)) throw replicasProblem(addError, config.num_replicas)
    })
  }
  return jsm
}

/** A JetStream key-value bucket, created when missing (one value per key), kept on `jetStreamReplicas` servers. */
export async function openBucket(nc: NatsConnection, name: string): Promise<KV> {
  const replicas = jetStreamReplicas(nc)
  const kv = await nc
    .jetstream()
    .views.kv(name, { history: 1, replicas })
    .catch((error: Error) => {
      throw replicasProblem(error, replicas)
    })
  // views.kv creates a missing bucket with this count but leaves an existing one as it was
  const { config } = (await kv.status()).streamInfo
  if (config.num_replicas !== replicas) {
    const jsm = await nc.jetstreamManager()
    await jsm.streams.update(config.name, { ...config, num_replicas: replicas }).catch((error: Error) => {
      throw replicasProblem(error, replicas)
    })
  }
  return kv
}

/**
 * `js.publish`, and with tracing on a producer span whose context travels in the message's
 * `traceparent` header, so the consumer continues the publisher's trace (workers.ts). Off, it
 * is `js.publish` and nothing more.
 */
export async function publishTraced(
  js: JetStreamClient,
  subject: string,
  data: Uint8Array,
  options: Partial<JetStreamPublishOptions> = {},
  spec: Pick<SpanSpec, 'parent' | 'links'> = {},
): Promise<PubAck> {
  if (!tracingEnabled()) return js.publish(subject, data, options)
  const attributes = {
    'messaging.system': 'nats',
    'messaging.destination.name': subject,
    'messaging.operation.type': 'send',
    ...(options.msgID ? { 'messaging.message.id': options.msgID } : {}),
  }
  return inSpan(`publish ${subject}`, { ...spec, kind: SpanKind.PRODUCER, attributes }, async (span) => {
    const ack = await js.publish(subject, data, { ...options, headers: injectNats(options.headers) })
    span?.setAttribute('ats.stream.sequence', ack.seq)
    if (ack.duplicate) span?.setAttribute('ats.duplicate', true)
    return ack
  })
}
