import { randomBytes } from 'node:crypto'
import { hashApiKey, type KeyEntry, type KeyPolicyReply, type SpendPolicy, type Tier } from '@ats/contracts'
import { getAddress } from 'viem'
import { PolicyOnReadonlyKey } from '../errors.ts'
import { Prisma, type ApiKey, type PrismaClient } from '../generated/prisma/client.ts'
import { retireWebhooksOfKey, type RetiredWebhooks } from '../webhooks/keyRevocation.ts'
import { generateApiKey, visiblePrefix } from './apiKeys.ts'

export interface RevokedKey {
  id: string
  hash: string
  revokedAt: number
  /** what the revocation did to the key's webhooks */
  webhooks: RetiredWebhooks
}

// the column holds only policies the contract's schema accepted on the way in
const policyOf = (row: Pick<ApiKey, 'spendPolicy'>) => (row.spendPolicy ?? null) as SpendPolicy | null
const policyColumn = (policy: SpendPolicy | null | undefined) => policy ?? Prisma.DbNull

const entryOf = (row: ApiKey): KeyEntry => ({
  id: row.id,
  tier: row.tier,
  label: row.label,
  prefix: row.prefix,
  createdAt: row.createdAt.getTime(),
  policy: policyOf(row),
  wallet: row.wallet ? getAddress(row.wallet) : null,
})

const newKeyId = () => `key_${randomBytes(12).toString('base64url')}`

/** The API-key repository: raw keys exist only in create's answer; rows hold the SHA-256. */
export function createKeyStore(db: PrismaClient) {
  return {
    async create(tier: Tier, label: string, policy?: SpendPolicy, wallet?: string): Promise<KeyEntry & { key: string }> {
      if (tier === 'readonly' && policy) throw new PolicyOnReadonlyKey()
      const key = generateApiKey()
      const row = await db.apiKey.create({
        data: {
          id: newKeyId(),
          tier,
          label,
          prefix: visiblePrefix(key),
          hash: hashApiKey(key),
          spendPolicy: policyColumn(policy),
          wallet: wallet?.toLowerCase() ?? null,
        },
      })
      return { ...entryOf(row), key }
    },

    /** Sets (null: clears) the spend policy of an active key; undefined when there is no such active key. */
    async setPolicy(id: string, policy: SpendPolicy | null): Promise<KeyEntry | undefined> {
      const current = await db.apiKey.findUnique({ where: { id } })
      if (!current || current.revokedAt) return undefined
      if (current.tier === 'readonly') throw new PolicyOnReadonlyKey()
      const { count } = await db.apiKey.updateMany({ where: { id, revokedAt: null }, data: { spendPolicy: policyColumn(policy) } })
      return count === 0 ? undefined : { ...entryOf(current), policy }
    },

    async listActive(): Promise<KeyEntry[]> {
      const rows = await db.apiKey.findMany({ where: { revokedAt: null }, orderBy: { createdAt: 'asc' } })
      return rows.map(entryOf)
    },

    /**
     * Revokes an active key, and with it its webhooks (disabled, pending deliveries cancelled) in
     * the same transaction; undefined when there is no such active key.
     */
    async revoke(id: string): Promise<RevokedKey | undefined> {
      const revokedAt = new Date()
      return db.$transaction(async (tx) => {
        const { count } = await tx.apiKey.updateMany({ where: { id, revokedAt: null }, data: { revokedAt } })
        if (count === 0) return undefined
        const row = await tx.apiKey.findUniqueOrThrow({ where: { id } })
        const webhooks = await retireWebhooksOfKey(tx, id, revokedAt)
        return { id, hash: row.hash, revokedAt: revokedAt.getTime(), webhooks }
      })
    },

    /** The active key with its spend policy and bound wallet, for trading's check before a swap and automation's recipient check. */
    async findActiveById(id: string): Promise<KeyPolicyReply['key']> {
      const row = await db.apiKey.findUnique({
        where: { id },
        select: { id: true, tier: true, revokedAt: true, spendPolicy: true, wallet: true },
      })
      return row && !row.revokedAt
        ? { id: row.id, tier: row.tier, policy: policyOf(row), wallet: row.wallet ? getAddress(row.wallet) : null }
        : null
    },

    async findActiveByHash(hash: string): Promise<{ id: string; tier: Tier; wallet: string | null } | null> {
      const row = await db.apiKey.findUnique({ where: { hash }, select: { id: true, tier: true, revokedAt: true, wallet: true } })
      return row && !row.revokedAt ? { id: row.id, tier: row.tier, wallet: row.wallet ? getAddress(row.wallet) : null } : null
    },

    /**
     * Makes ADMIN_API_KEY a working admin key (stored hashed) and revokes any earlier
     * bootstrap key (and its webhooks), so rotating the variable retires the old one. A
     * bootstrap key an admin revoked stays revoked. Returns what it revoked, to broadcast.
     */
    async seedBootstrap(raw: string): Promise<{ revoked: RevokedKey[]; state: 'created' | 'kept' | 'revoked' }> {
      const hash = hashApiKey(raw)
      return db.$transaction(async (tx) => {
        const stale = await tx.apiKey.findMany({ where: { bootstrap: true, revokedAt: null, hash: { not: hash } } })
        const revokedAt = new Date()
        await tx.apiKey.updateMany({ where: { id: { in: stale.map((k) => k.id) } }, data: { revokedAt } })
        const revoked: RevokedKey[] = []
        for (const k of stale) {
          revoked.push({ id: k.id, hash: k.hash, revokedAt: revokedAt.getTime(), webhooks: await retireWebhooksOfKey(tx, k.id, revokedAt) })
        }
        const existing = await tx.apiKey.findUnique({ where: { hash } })
        if (existing) return { revoked, state: existing.revokedAt ? 'revoked' : 'kept' }
        await tx.apiKey.create({
          data: { id: newKeyId(), tier: 'admin', label: 'bootstrap (ADMIN_API_KEY)', prefix: visiblePrefix(raw), hash, bootstrap: true },
        })
        return { revoked, state: 'created' }
      })
    },
  }
}

export type KeyStore = ReturnType<typeof createKeyStore>
