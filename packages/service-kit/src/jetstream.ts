import { StartupError } from './config.ts'
import { DiscardPolicy, RetentionPolicy, StorageType, nanos, type JetStreamManager, type KV, type NatsConnection } from 'nats'

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
  }
  try {
    await jsm.streams.info(spec.name)
    await jsm.streams.update(spec.name, config)
  } catch (error) {
    if (!/stream not found/i.test((error as Error).message)) throw error
    await jsm.streams.add(config).catch(async (addError: Error) => {
      // another replica created it in between
      if (!/already in use/i.test(addError.message)) throw addError
    })
  }
  return jsm
}

/** A JetStream key-value bucket, created when missing (one value per key). */
export function openBucket(nc: NatsConnection, name: string): Promise<KV> {
  return nc.jetstream().views.kv(name, { history: 1 })
}
