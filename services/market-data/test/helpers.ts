import { identityHeaders } from '@ats/contracts'
import { startTestDevnet } from '@ats/devnet'
import { baseTestEnv, migratedDatabase, startService, testInfra, testInternalToken } from '@ats/service-kit/testing'
import type { Test } from 'tap'
import type { PrismaClient } from '../src/generated/prisma/client.ts'
import { marketDataService } from '../src/service.ts'

export { eventually } from '@ats/service-kit/testing'
export { startTestDevnet } from '@ats/devnet'

/** A fresh database with market-data's migrations applied, and the service's Prisma client on it (closed at teardown). */
export const migratedDb = (t: Test): Promise<{ db: PrismaClient; url: string }> => migratedDatabase(t, marketDataService.database!)

/** What the gateway adds to a request of an API key. */
export const keyHeaders = (keyId = 'key_market_reader', tier = 'readonly') => ({
  [identityHeaders.internalToken]: testInternalToken,
  [identityHeaders.tier]: tier,
  [identityHeaders.keyId]: keyId,
  [identityHeaders.ownerId]: keyId,
})

export type Chain = Awaited<ReturnType<typeof startTestDevnet>>

/**
 * market-data on a fresh database, NATS namespace and Redis, against the given devnet (or a
 * new one). `call` speaks to it as the gateway would. Pass the same `base` to start replicas.
 */
export async function startMarket(
  t: Test,
  { env = {}, chain, base }: { env?: NodeJS.ProcessEnv; chain?: Chain; base?: NodeJS.ProcessEnv } = {},
) {
  const devnet = chain ?? (await startTestDevnet(t))
  const shared = base ?? { ...(await baseTestEnv(t)), REDIS_URL: (await testInfra()).redisUrl }
  const service = await startService(t, marketDataService, { ...shared, ...devnet.chainEnv, ...env })
  const call = async (path: string, headers: Record<string, string> = {}) => {
    const res = await fetch(`${service.url}${path}`, { headers: { ...keyHeaders(), ...headers } })
    const text = await res.text()
    return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as any) : undefined }
  }
  return { ...devnet, base: shared, service, call }
}
