// Redis for the services that declare it: one client per process, to one server (REDIS_URL) or to
// the primary that Redis Sentinel names (REDIS_SENTINELS), and, with Sentinel, the wait for a
// replica's copy of the writes that must outlive a failover (replicaAcknowledgement).
import { Redis, type RedisOptions } from 'ioredis'
import { safeUrl, StartupError } from './config.ts'
import { withTimeout } from './errors.ts'
import type { Logger } from './logger.ts'

/** Redis Sentinel: the sentinels' host:port, comma-separated, and the name they monitor the primary under. */
export interface SentinelOptions {
  sentinels: string
  master: string
}

/** How long a write waits for a replica's acknowledgement before it is not trusted (one round trip to a replica, normally). */
export const REPLICA_ACK_TIMEOUT_MS = 1_000

/** The options ioredis gets for `url`, or for the primary the sentinels name, with REDIS_URL's credentials and db. */
function optionsOf(url: string, sentinel: SentinelOptions | undefined): RedisOptions {
  // auto-pipelining sends the commands of one event-loop turn in one write
  const common: RedisOptions = { lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 3000, enableAutoPipelining: true }
  if (!sentinel) return common
  const parsed = new URL(url)
  const db = parsed.pathname.length > 1 ? Number(parsed.pathname.slice(1)) : 0
  if (!Number.isInteger(db) || db < 0) throw new StartupError(`REDIS_URL's database must be a number, like redis://:password@redis/0`)
  const password = parsed.password ? decodeURIComponent(parsed.password) : undefined
  const tls = parsed.protocol === 'rediss:'
  return {
    ...common,
    sentinels: sentinel.sentinels.split(',').map((one) => {
      const [host, port] = one.trim().split(':')
      return { host: host!, port: Number(port) }
    }),
    name: sentinel.master,
    db,
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    // the sentinels take the primary's password, as Sentinel-managed charts set them up
    ...(password ? { password, sentinelPassword: password } : {}),
    ...(tls ? { tls: {}, sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
    // a primary demoted while up (a manual failover) has its clients' connections closed by the
    // sentinels; should one still answer a write READONLY, reconnect (asking the sentinels again) and
    // resend it. Not ioredis' failoverDetector: its disconnect during a reconnection in progress can
    // end the client for good (seen under load: "Connection is closed" after a SIGKILL of the primary).
    reconnectOnError: (error) => (error.message.startsWith('READONLY') ? 2 : false),
  }
}

/**
 * Redis for services that declare it: connected at start, checked by /ready, closed on shutdown.
 * With `sentinel`, the primary is the one the sentinels name (asked again at every reconnection,
 * so a promoted replica is followed); REDIS_URL then gives only the password, user, db and TLS
 * (rediss:), its host and port are not used. A command sent while no primary answers is queued
 * for the next connection and fails once a reconnection attempt after it fails
 * (maxRetriesPerRequest: 1): during a failover a request waits for the promotion (about 2 s
 * with the sentinels' 1 s down-after) or gets an error (503).
 */
export async function connectRedis(url: string, log: Logger, sentinel?: SentinelOptions): Promise<Redis> {
  const redis = new Redis(url, optionsOf(url, sentinel))
  // ioredis reports connection errors as events too (it reconnects by itself); the URL is not in them
  redis.on('error', (error: Error) => log.warn({ err: { message: error.message } }, 'redis connection error'))
  if (sentinel) trackConnections(redis)
  try {
    await redis.connect()
    return redis
  } catch (error) {
    redis.disconnect()
    const where = sentinel ? `through the sentinels ${sentinel.sentinels} (master ${sentinel.master})` : `at ${safeUrl(url)}`
    throw new StartupError(
      `Redis is not reachable ${where} (${(error as Error).message}): start redis-server${sentinel ? ' and redis-sentinel' : ''} or unset REDIS_URL`,
    )
  }
}

interface Acknowledgements {
  /** connections lost so far: a WAIT answered on another connection than the write's says nothing of it */
  drops: number
  /** the WAIT that writes acknowledged from now on join, until it is sent */
  next?: { drops: number; done: Promise<void> }
}

const acknowledgements = new WeakMap<Redis, Acknowledgements>()
const connectionLost = 'the Redis connection was lost before a replica acknowledged the write'

function trackConnections(redis: Redis) {
  const state: Acknowledgements = { drops: 0 }
  acknowledgements.set(redis, state)
  redis.on('close', () => state.drops++)
}

/** Sends one WAIT for every write of this connection so far; fails unless a replica has them all, answered on the connection `drops` names. */
async function waitForReplica(redis: Redis, state: Acknowledgements, drops: number): Promise<void> {
  const replicas = await withTimeout(
    redis.wait(1, REPLICA_ACK_TIMEOUT_MS) as Promise<number>,
    REPLICA_ACK_TIMEOUT_MS + 1_000,
    () => new Error(`Redis did not answer WAIT within ${REPLICA_ACK_TIMEOUT_MS + 1_000} ms`),
  )
  // ioredis sends a command again on the next connection when the first one is lost before it answers;
  // a WAIT sent again runs on another primary, where this write may never have been
  if (state.drops !== drops) throw new Error(connectionLost)
  if (replicas < 1) throw new Error(`no Redis replica acknowledged the write within ${REPLICA_ACK_TIMEOUT_MS} ms`)
}

/**
 * With Sentinel, a function to call before the writes that must outlive a failover; what it
 * returns, called once they are answered, resolves when a replica holds them (Redis's WAIT 1,
 * REPLICA_ACK_TIMEOUT_MS), and rejects when none does in time or the connection changed since
 * (a WAIT on another connection says nothing of them): replication is asynchronous, and a write
 * only the old primary had is gone once a replica is promoted. Answer on their strength only
 * after it resolves. The waits of one event-loop turn share one WAIT. Without Sentinel,
 * undefined: one server has no replica to wait for, and the hot path pays nothing.
 */
export function replicaAcknowledgement(redis: Redis): (() => () => Promise<void>) | undefined {
  const state = acknowledgements.get(redis)
  if (!state) return undefined
  return () => {
    // the connection the writes go out on
    const drops = state.drops
    return () => {
      if (state.drops !== drops) return Promise.reject(new Error(connectionLost))
      const next = state.next
      if (next && next.drops === drops) return next.done
      const done = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
        // sent now: writes answered after this wait for the next WAIT
        if (state.next?.done === done) state.next = undefined
        return waitForReplica(redis, state, drops)
      })
      state.next = { drops, done }
      return done
    }
  }
}
