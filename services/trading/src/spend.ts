// What a key, a payer or the whole server wallet already spent today: swaps and launches counted together.
import type { Prisma } from './generated/prisma/client.ts'

type Tx = Prisma.TransactionClient

/** The statuses of swaps that count against limits: everything that was, or may yet be, sent (a reverted swap moved nothing). */
export const countedStatuses = ['pending', 'submitted', 'success'] as const
/** A launch's cost is its gas, paid whether it reverts or not. */
const countedLaunches = [...countedStatuses, 'reverted'] as const

export const startOfUtcDay = (ms: number) => {
  const d = new Date(ms)
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()))
}

/** One lock for every check-then-record of a spend (swaps and launches), so concurrent ones count each other; held to the transaction's end. */
export async function lockSpends(t: Tx): Promise<void> {
  await t.$queryRawUnsafe(`SELECT pg_advisory_xact_lock(hashtext('ats:trading:spend'))::text`)
}

/** Whose spends: a key's, a payer's (agent swaps without a key), or everyone's (the wallet-wide limits). */
export type SpendOwner = { keyId: string } | { payer: string } | 'everyone'

/**
 * USD counted today (UTC) for `owner`: swaps at their value plus the approval gas they paid, and
 * launches at the most their gas could cost.
 */
export async function spentToday(t: Tx, owner: SpendOwner, since: Date): Promise<number> {
  const base = { createdAt: { gte: since }, status: { in: [...countedStatuses] } }
  // a swap under a user's grant spends the user's tokens, not the server wallet's
  const swapsOf = owner === 'everyone' ? {} : 'keyId' in owner ? { keyId: owner.keyId } : { keyId: null, ownerId: owner.payer }
  const swaps = await t.execution.aggregate({ _sum: { usdValue: true, gasUsd: true }, where: { ...base, ...swapsOf, grantId: null } })
  // launches are made for keys only
  const launches =
    owner !== 'everyone' && !('keyId' in owner)
      ? undefined
      : await t.launch.aggregate({
          _sum: { usdValue: true },
          where: { ...base, status: { in: [...countedLaunches] }, ...(owner === 'everyone' ? {} : { keyId: owner.keyId }) },
        })
  return (swaps._sum.usdValue ?? 0) + (swaps._sum.gasUsd ?? 0) + (launches?._sum.usdValue ?? 0)
}

/** A key's launches today (UTC) that were, or may yet be, sent (reverted ones too: their gas was paid). */
export const launchesToday = (t: Tx, keyId: string, since: Date) =>
  t.launch.count({ where: { keyId, createdAt: { gte: since }, status: { in: [...countedLaunches] } } })
