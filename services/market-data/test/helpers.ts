import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createChainClients } from '@ats/chain'
import { identityHeaders } from '@ats/contracts'
import { startDevnet } from '@ats/devnet'
import { migrate } from '@ats/service-kit/migrator'
import { baseTestEnv, freshDatabase, startService, testInfra, testInternalToken } from '@ats/service-kit/testing'
import { PrismaPg } from '@prisma/adapter-pg'
import type { Test } from 'tap'
import { PrismaClient } from '../src/generated/prisma/client.ts'
import { marketDataService } from '../src/service.ts'

export { eventually } from '@ats/service-kit/testing'

export const schema = 'market_data'

/** A fresh database with market-data's migrations applied, and a Prisma client on it (closed at teardown). */
export async function migratedDb(t: Test): Promise<{ db: PrismaClient; url: string }> {
  const url = await freshDatabase(t)
  await migrate(url, { schema, dir: fileURLToPath(new URL('../prisma/migrations', import.meta.url)) })
  const db = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, options: `-c search_path=${schema}` }, { schema }) })
  t.teardown(() => db.$disconnect())
  return { db, url }
}

/** A devnet of the test's own, with its address book written to a temporary file. */
export async function startTestDevnet(t: Test) {
  const addressBookPath = join(mkdtempSync(join(tmpdir(), 'book-')), 'address-book.json')
  const devnet = await startDevnet({ port: 0, addressBookPath })
  t.teardown(() => devnet.stop())
  const chainEnv = { RPC_URL: devnet.rpcUrl, CHAIN_ID: '31337', ADDRESS_BOOK: addressBookPath }
  const { publicClient } = createChainClients({ rpcUrl: devnet.rpcUrl, chainId: 31337 })
  return { devnet, chainEnv, publicClient }
}

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
export async function startMarket(t: Test, { env = {}, chain, base }: { env?: NodeJS.ProcessEnv; chain?: Chain; base?: NodeJS.ProcessEnv } = {}) {
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
