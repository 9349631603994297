import { Redis } from 'ioredis'
import { safeUrl, StartupError } from './config.ts'
import type { Logger } from './logger.ts'

/** Redis for services that declare it: connected at start, checked by /ready, closed on shutdown. */
export async function connectRedis(url: string, log: Logger): Promise<Redis> {
  // auto-pipelining sends the commands of one event-loop turn in one write
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 3000, enableAutoPipelining: true })
  // ioredis reports connection errors as events too (it reconnects by itself); the URL is not in them
  redis.on('error', (error: Error) => log.warn({ err: { message: error.message } }, 'redis connection error'))
  try {
    await redis.connect()
    return redis
  } catch (error) {
    redis.disconnect()
    throw new StartupError(`Redis is not reachable at ${safeUrl(url)} (${(error as Error).message}): start redis-server or unset REDIS_URL`)
  }
}
