import { StartupError, safeUrl } from '@ats/service-kit'
import { Redis } from 'ioredis'

export async function connectRedis(url: string): Promise<Redis> {
  // auto-pipelining sends the rate-limit commands of one event-loop turn in one write
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 3000, enableAutoPipelining: true })
  try {
    await redis.connect()
    return redis
  } catch (error) {
    redis.disconnect()
    throw new StartupError(
      `Redis is not reachable at ${safeUrl(url)} (${(error as Error).message}): start redis-server or unset REDIS_URL to count rate limits in memory`,
    )
  }
}
