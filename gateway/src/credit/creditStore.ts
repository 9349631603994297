// The gateways' fast copy of each wallet's prepaid credit, in Redis: debited atomically for every
// gateway at once, given credit by the ledger's adjustments, rebuilt from the ledger's snapshot
// when Redis lost it. The ledger (admin) stays authoritative; this copy only decides fast.
import { firstLine, replicaAcknowledgement } from '@ats/service-kit'
import { randomBytes } from 'node:crypto'
import type { CreditAdjusted } from '@ats/contracts'
import type { Redis } from 'ioredis'
import { CreditUnavailable } from '../errors.ts'

/** What a debit came to: taken, a repeat of an id already taken (not taken again), or refused for want of credit. */
export type DebitOutcome =
  | { kind: 'debited'; available: bigint; amount: bigint }
  | { kind: 'replayed'; amount: bigint }
  | { kind: 'short'; available: bigint }

/** The ledger's view of a wallet: `available` once every published debit is in, and the last adjustment it includes. */
export interface CreditSnapshot {
  available: bigint
  entry: bigint
}

export interface CreditStoreOptions {
  redis: Redis
  namespace: string
  /** the ledger's snapshot of a wallet (admin.credit.snapshot), asked when Redis has no copy */
  snapshot: (wallet: string) => Promise<CreditSnapshot>
  /** how long a debit's id is remembered, so a repeat is not taken twice (the stream's duplicate window) */
  idTtlMs: number
  /** how long adjustments applied are remembered (the stream's age limit) */
  adjustmentTtlMs: number
}

// KEYS: copy and id of each debit, in pairs. ARGV: amount ('all': what is available) and id ttl
// (ms) of each debit, in pairs. Every debit of one event-loop turn goes in one call (one round
// trip, one reply for all), each judged on its own in order: a repeated id answers what it took;
// a missing copy asks to be rebuilt; else the credit must cover the amount (at least 1), which is
// taken and the id kept. Answers a kind, a value and an amount per debit, flat.
const debitScript = `
local out = {}
for i = 1, #KEYS, 2 do
  local copyKey, idKey, amount, ttl = KEYS[i], KEYS[i + 1], ARGV[i], ARGV[i + 1]
  local first = redis.call('GET', idKey)
  if first then
    out[#out + 1] = 'replayed'; out[#out + 1] = string.match(first, '^[^:]*'); out[#out + 1] = '0'
  else
    local copy = redis.call('HMGET', copyKey, 'available', 'gen')
    if not copy[1] then
      out[#out + 1] = 'missing'; out[#out + 1] = '0'; out[#out + 1] = '0'
    else
      if amount == 'all' then amount = copy[1] end
      if tonumber(amount) < 1 or tonumber(copy[1]) < tonumber(amount) then
        out[#out + 1] = 'short'; out[#out + 1] = copy[1]; out[#out + 1] = amount
      else
        local left = redis.call('HINCRBY', copyKey, 'available', '-' .. amount)
        redis.call('SET', idKey, amount .. ':' .. copy[2], 'PX', ttl)
        out[#out + 1] = 'debited'; out[#out + 1] = string.format('%d', left); out[#out + 1] = amount
      end
    end
  end
end
return out
`

// KEYS: copy, id. A debit given back (its publish failed, so the ledger never saw it): once, and
// only to the copy it was taken from (a copy rebuilt since never had it taken).
const giveBackScript = `
local taken = redis.call('GET', KEYS[2])
if not taken then return 0 end
redis.call('DEL', KEYS[2])
local amount, gen = string.match(taken, '^([^:]*):(.*)$')
if redis.call('HGET', KEYS[1], 'gen') == gen then redis.call('HINCRBY', KEYS[1], 'available', amount) end
return 1
`

// KEYS: copy, adjustments. ARGV: entry, delta, ttl (ms). Each entry is added once: the
// adjustments hash remembers it (entries arrive in any order: gateways share one consumer).
// Without a copy it waits there for the rebuild; one the copy's snapshot included is skipped.
const applyScript = `
local base = redis.call('HGET', KEYS[1], 'entry')
if base and tonumber(ARGV[1]) <= tonumber(base) then return 'included' end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 'applied' end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if not base then return 'pending' end
redis.call('HINCRBY', KEYS[1], 'available', ARGV[2])
return 'added'
`

// KEYS: copy, adjustments. ARGV: available, entry, generation. The first rebuild wins (another
// gateway's may have landed meanwhile); adjustments the snapshot did not include are added.
const rebuildScript = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local available = tonumber(ARGV[1])
local adjustments = redis.call('HGETALL', KEYS[2])
for i = 1, #adjustments, 2 do
  if tonumber(adjustments[i]) > tonumber(ARGV[2]) then available = available + tonumber(adjustments[i + 1])
  else redis.call('HDEL', KEYS[2], adjustments[i]) end
end
redis.call('HSET', KEYS[1], 'available', string.format('%d', available), 'entry', ARGV[2], 'gen', ARGV[3])
return 1
`

interface ScriptedRedis extends Redis {
  creditDebit(numberOfKeys: number, ...keysThenArgs: string[]): Promise<string[]>
  creditGiveBack(copy: string, id: string): Promise<number>
  creditApply(copy: string, adjustments: string, entry: string, delta: string, ttlMs: string): Promise<string>
  creditRebuild(copy: string, adjustments: string, available: string, entry: string, generation: string): Promise<number>
}

export const CREDIT_KEY_PREFIX = 'ats-credit:'

const maxDebitsPerCall = 128

export function createCreditStore({ redis, namespace, snapshot, idTtlMs, adjustmentTtlMs }: CreditStoreOptions) {
  const scripted = redis as ScriptedRedis
  scripted.defineCommand('creditDebit', { lua: debitScript })
  scripted.defineCommand('creditGiveBack', { numberOfKeys: 2, lua: giveBackScript })
  scripted.defineCommand('creditApply', { numberOfKeys: 2, lua: applyScript })
  scripted.defineCommand('creditRebuild', { numberOfKeys: 2, lua: rebuildScript })
  // with Sentinel, a debit or an adjustment counts once a replica holds it: a failover would forget it otherwise
  const acknowledgement = replicaAcknowledgement(redis)
  const base = (wallet: string) => `${CREDIT_KEY_PREFIX}${namespace}:${wallet.toLowerCase()}`
  const copyOf = (wallet: string) => `${base(wallet)}:copy`
  const adjustmentsOf = (wallet: string) => `${base(wallet)}:adjustments`
  const idOf = (wallet: string, id: string) => `${base(wallet)}:id:${id}`
  const unavailable = (error: unknown): never => {
    if (error instanceof CreditUnavailable) throw error
    throw new CreditUnavailable(`the credit store failed: ${firstLine(error)}`)
  }

  async function rebuild(wallet: string) {
    let ledger: CreditSnapshot
    try {
      ledger = await snapshot(wallet)
    } catch (error) {
      throw new CreditUnavailable(`the credit ledger could not be read: ${firstLine(error)}`)
    }
    const generation = randomBytes(8).toString('hex')
    await scripted.creditRebuild(copyOf(wallet), adjustmentsOf(wallet), ledger.available.toString(), ledger.entry.toString(), generation)
  }

  /**
   * A debit no replica acknowledged is given back (if the primary still answers) and refused
   * (503): served on it, a failover could forget it, and the credit be spent again.
   */
  async function replicated(wallet: string, id: string, ack: () => Promise<void>) {
    try {
      await ack()
    } catch (error) {
      await scripted.creditGiveBack(copyOf(wallet), idOf(wallet, id)).catch(() => undefined)
      throw new CreditUnavailable(`the credit debit was not replicated: ${firstLine(error)}`)
    }
  }

  interface Queued {
    keys: [string, string]
    args: [string, string]
    settle: (result: { kind: string; value: bigint; amount: bigint } | Error) => void
  }
  let queued: Queued[] = []
  /** sends the queued debits in one call; each caller gets its own answer, or the call's error */
  async function sendQueued() {
    const batch = queued
    if (batch.length === 0) return
    queued = []
    try {
      const reply = await scripted.creditDebit(batch.length * 2, ...batch.flatMap((q) => q.keys), ...batch.flatMap((q) => q.args))
      for (const [i, q] of batch.entries())
        q.settle({ kind: reply[i * 3]!, value: BigInt(reply[i * 3 + 1]!), amount: BigInt(reply[i * 3 + 2]!) })
    } catch (error) {
      for (const q of batch) q.settle(error as Error)
    }
  }
  /** one debit, sent with the others of this event-loop turn (at most maxDebitsPerCall a call, so one script never holds Redis long) */
  function tryDebit(wallet: string, id: string, amount: bigint | 'all', ttlMs: number) {
    return new Promise<{ kind: string; value: bigint; amount: bigint }>((resolve, reject) => {
      if (queued.length === 0) setImmediate(sendQueued)
      queued.push({
        keys: [copyOf(wallet), idOf(wallet, id)],
        args: [amount.toString(), String(ttlMs)],
        settle: (result) => (result instanceof Error ? reject(result) : resolve(result)),
      })
      if (queued.length >= maxDebitsPerCall) void sendQueued()
    })
  }

  return {
    /**
     * Takes `amount` ('all': all that is available) from the wallet's credit under `id` (unique
     * per wallet): once per id while the id is remembered (`ttlMs`, else idTtlMs), never below
     * zero on any number of gateways. Without a copy in Redis the ledger's snapshot is read first.
     * Throws CreditUnavailable (503) when Redis or the ledger cannot be reached.
     */
    async debit(wallet: string, id: string, amount: bigint | 'all', ttlMs = idTtlMs): Promise<DebitOutcome> {
      try {
        let acknowledged = acknowledgement?.()
        let result = await tryDebit(wallet, id, amount, ttlMs)
        if (result.kind === 'missing') {
          await rebuild(wallet)
          acknowledged = acknowledgement?.()
          result = await tryDebit(wallet, id, amount, ttlMs)
        }
        if (result.kind === 'debited') {
          if (acknowledged) await replicated(wallet, id, acknowledged)
          return { kind: 'debited', available: result.value, amount: result.amount }
        }
        if (result.kind === 'replayed') return { kind: 'replayed', amount: result.value }
        if (result.kind === 'short') return { kind: 'short', available: result.value }
        throw new CreditUnavailable('the credit copy vanished while it was rebuilt')
      } catch (error) {
        return unavailable(error)
      }
    },
    /** gives a debit back that the ledger never heard of (its publish failed) */
    async giveBack(wallet: string, id: string): Promise<void> {
      await scripted.creditGiveBack(copyOf(wallet), idOf(wallet, id))
    },
    /** adds credit the ledger gave (a settled top-up, a released hold, a refund) once per entry */
    async apply(adjusted: Pick<CreditAdjusted, 'wallet' | 'entry' | 'delta'>): Promise<'added' | 'pending' | 'included' | 'applied'> {
      const acknowledged = acknowledgement?.()
      const outcome = (await scripted.creditApply(
        copyOf(adjusted.wallet),
        adjustmentsOf(adjusted.wallet),
        adjusted.entry,
        adjusted.delta,
        String(adjustmentTtlMs),
      )) as 'added' | 'pending' | 'included' | 'applied'
      // acked to the stream only once a replica holds it (a failure is delivered again; entries are added once)
      if (acknowledged) await acknowledged()
      return outcome
    },
    /** the credit the copy holds, undefined without a copy */
    async available(wallet: string): Promise<bigint | undefined> {
      const value = await redis.hget(copyOf(wallet), 'available')
      return value === null ? undefined : BigInt(value)
    },
    /** the Redis keys of a wallet's credit (tests delete them to see the copy rebuilt) */
    keysOf: (wallet: string) => [copyOf(wallet), adjustmentsOf(wallet)],
  }
}

export type CreditStore = ReturnType<typeof createCreditStore>
