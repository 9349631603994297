// The idempotency store: a retried side effect (a swap, a job step, a run) executes once and later tries get its result.
import { createHash, randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import {
  clientErrorStatus,
  IdempotencyInProgress,
  IdempotencyKeyInvalid,
  IdempotencyMismatch,
  IdempotencyReplayed,
  IdempotencyUnstorable,
  withTimeout,
} from './errors.ts'
import type { Logger } from './logger.ts'
import { ensureKitTables, quoteIdent } from './migrator.ts'
import { startWorkerLoop, type WorkerLoop } from './workers.ts'

/** the stored failure of a result that is not JSON: replayed as IdempotencyUnstorable (500) */
const unstorable = (({ code, message }) => ({ code, error: message }))(new IdempotencyUnstorable())

export interface IdempotencyOptions {
  /** the service's own Postgres schema; the store keeps `<schema>.idempotency_keys` */
  schema: string
  /** how long a claim holds without renewal; the running call renews it every leaseMs/3 */
  leaseMs?: number
  /** how long a repeat waits for a first call still running before answering 409 */
  waitMs?: number
  /** how often a repeat looks again at a call running in another process */
  pollMs?: number
  log?: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void }
}

export interface IdempotencyStore {
  /**
   * Runs `fn` once per (scope, key). `fingerprint` (see fingerprintOf) identifies the
   * request the key was first used with. The call that runs fn gets fn's own value with
   * replayed: false; every repeat gets the stored JSON of it with replayed: true.
   */
  run<T>(scope: string, key: string, fingerprint: string, fn: () => Promise<T>): Promise<{ result: T; replayed: boolean }>
  /**
   * Deletes keys finished more than `olderThanMs` ago, and claims of that age whose lease ran out
   * (their process died); a service runs it now and then (Stripe keeps keys 24 h).
   */
  purge(olderThanMs: number): Promise<number>
  /** Ends the pool when the store made it from a URL; a pool given to the store is the caller's to end. */
  close(): Promise<void>
}

interface Row {
  fingerprint: string
  state: 'running' | 'done'
  result: unknown
  status: number | null
  expired: boolean
}

interface Outcome<T> {
  result: T
  replayed: boolean
  /** the result as repeats see it: parsed back from its JSON */
  stored: unknown
}

/** Statuses that say "try again later" (423: the server wallet is paused): storing them would fail the key for good. */
const transientStatuses = new Set([408, 423, 429])

/** A registry error a client caused: the same request would fail the same way, so the failure is the result. */
function clientError(error: unknown): { status: number; code: string; message: string } | undefined {
  const status = clientErrorStatus(error)
  if (status === undefined || transientStatuses.has(status)) return undefined
  const { code, message } = error as { code: string; message: unknown }
  return { status, code, message: String(message) }
}

function replayedError(status: number, stored: unknown): Error {
  const { code, error } = (stored ?? {}) as { code?: string; error?: string }
  return Object.assign(new IdempotencyReplayed(error ?? 'the first request with this idempotency key failed'), {
    code: code ?? 'ATS_ERR_IDEMPOTENCY_REPLAYED',
    statusCode: status,
  })
}

/**
 * Stripe-like idempotency in the service's Postgres schema. The first call claims the
 * key (a row in state 'running' with a lease), runs fn and stores its JSON result as
 * 'done'; repeats with the same fingerprint replay it without running fn. Repeats that
 * come while it runs wait for it: in this process they share its promise, in others
 * they poll the row, both for at most waitMs (then 409 in progress). A repeat with
 * another fingerprint is refused with 409.
 *
 * When fn throws a registry error with a 4xx status (the client's mistake, 408/429
 * aside), that error is the stored result and repeats throw it again (same status,
 * code and message). Any other error deletes the claim, so a retry runs fn again.
 *
 * A claim whose lease ran out (its process died) is taken over by the next repeat,
 * which runs fn again: an fn with outside effects (a transaction sent) must be able to
 * resume, e.g. by looking up what the earlier try did (its tx hash) before acting.
 *
 * Results must be JSON-serialisable: bigint to string is the caller's job. A result
 * that does not serialise is a bug: fn's effect happened, so the key is kept as a
 * failure (repeats get 500) and the first caller gets a TypeError.
 */
export async function createIdempotencyStore(database: string | pg.Pool, options: IdempotencyOptions): Promise<IdempotencyStore> {
  const { leaseMs = 60_000, waitMs = 30_000, pollMs = 50, log } = options
  const owned = typeof database === 'string'
  const pool = owned ? new pg.Pool({ connectionString: database, max: 5 }) : database
  // an idle client that loses its connection must not crash the process
  if (owned)
    // the message and code only: pg's error carries its whole client
    pool.on('error', (error) =>
      log?.warn({ err: { message: error.message, code: (error as { code?: string }).code } }, 'idempotency store connection failed'),
    )
  const table = `${quoteIdent(options.schema)}.idempotency_keys`
  // created once; the migrator's lock keeps replicas (and a migration) from racing on the DDL
  const ddl = `CREATE TABLE IF NOT EXISTS ${table} (
    scope text NOT NULL,
    key text NOT NULL,
    fingerprint text NOT NULL,
    state text NOT NULL CHECK (state IN ('running', 'done')),
    owner text,
    result jsonb,
    status integer,
    locked_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (scope, key)
  )`
  await ensureKitTables(pool, options.schema, [ddl]).catch(async (error) => {
    if (owned) await pool.end()
    throw error
  })

  const lease = `now() + $4::float8 * interval '1 millisecond'`
  const sql = {
    claim: `INSERT INTO ${table} (scope, key, fingerprint, state, owner, locked_until) VALUES ($1, $2, $3, 'running', $5, ${lease})
            ON CONFLICT (scope, key) DO NOTHING RETURNING 1`,
    read: `SELECT fingerprint, state, result, status, locked_until < now() AS expired FROM ${table} WHERE scope = $1 AND key = $2`,
    takeOver: `UPDATE ${table} SET owner = $5, locked_until = ${lease}
               WHERE scope = $1 AND key = $2 AND fingerprint = $3 AND state = 'running' AND locked_until < now() RETURNING 1`,
    renew: `UPDATE ${table} SET locked_until = ${lease} WHERE scope = $1 AND key = $2 AND owner = $3 AND state = 'running'`,
    complete: `UPDATE ${table} SET state = 'done', result = $4::jsonb, status = $5, owner = NULL, locked_until = NULL, completed_at = now()
               WHERE scope = $1 AND key = $2 AND owner = $3 RETURNING 1`,
    release: `DELETE FROM ${table} WHERE scope = $1 AND key = $2 AND owner = $3`,
  }

  // calls running in this process, so repeats here wait on the promise instead of polling
  const inflight = new Map<string, { fingerprint: string; outcome: Promise<Outcome<unknown>> }>()

  async function complete(scope: string, key: string, owner: string, json: string, status: number | null): Promise<void> {
    try {
      const { rowCount } = await pool.query(sql.complete, [scope, key, owner, json, status])
      // the lease ran out and a repeat took the key over: its own run will store the result
      if (rowCount === 0) log?.warn({ scope, key }, 'idempotency claim was taken over while running; result not stored')
    } catch (error) {
      // fn's effect happened and its caller should know the result; the lease expires and a repeat resumes
      log?.error({ err: error, scope, key }, 'idempotency result could not be stored')
    }
  }

  async function execute<T>(scope: string, key: string, owner: string, fn: () => Promise<T>): Promise<Outcome<T>> {
    const renewal = setInterval(
      () => {
        pool
          .query(sql.renew, [scope, key, owner, leaseMs])
          .catch((error) => log?.warn({ err: error, scope, key }, 'idempotency lease not renewed'))
      },
      Math.max(1, Math.floor(leaseMs / 3)),
    )
    let result: T
    try {
      result = await fn()
    } catch (error) {
      clearInterval(renewal)
      const failure = clientError(error)
      if (failure) {
        await complete(scope, key, owner, JSON.stringify({ error: failure.message, code: failure.code }), failure.status)
      } else {
        await pool.query(sql.release, [scope, key, owner]).catch((releaseError) => {
          log?.warn({ err: releaseError, scope, key }, 'idempotency claim not released; it frees when its lease runs out')
        })
      }
      throw error
    }
    clearInterval(renewal)
    let json: string
    try {
      json = JSON.stringify(result ?? null)
    } catch (error) {
      await complete(scope, key, owner, JSON.stringify(unstorable), 500)
      throw new TypeError(`the result of ${scope} is not JSON-serialisable: ${(error as Error).message}`, { cause: error })
    }
    await complete(scope, key, owner, json, null)
    return { result, replayed: false, stored: JSON.parse(json) }
  }

  async function claimOrWait<T>(scope: string, key: string, fingerprint: string, fn: () => Promise<T>): Promise<Outcome<T>> {
    const deadline = Date.now() + waitMs
    for (;;) {
      const owner = randomUUID()
      const claimed = await pool.query(sql.claim, [scope, key, fingerprint, leaseMs, owner])
      if (claimed.rowCount) return execute(scope, key, owner, fn)
      const row = (await pool.query<Row>(sql.read, [scope, key])).rows[0]
      if (!row) continue // released since the insert: claim again
      if (row.fingerprint !== fingerprint) throw new IdempotencyMismatch(key)
      if (row.state === 'done') {
        if (row.status !== null) throw replayedError(row.status, row.result)
        return { result: row.result as T, replayed: true, stored: row.result }
      }
      if (row.expired) {
        const taken = await pool.query(sql.takeOver, [scope, key, fingerprint, leaseMs, owner])
        if (taken.rowCount) return execute(scope, key, owner, fn)
        continue
      }
      if (Date.now() + pollMs > deadline) throw new IdempotencyInProgress()
      await sleep(pollMs)
    }
  }

  return {
    async run<T>(scope: string, key: string, fingerprint: string, fn: () => Promise<T>) {
      const id = JSON.stringify([scope, key])
      const running = inflight.get(id)
      if (running) {
        if (running.fingerprint !== fingerprint) throw new IdempotencyMismatch(key)
        const { stored } = await withTimeout(running.outcome, waitMs, () => new IdempotencyInProgress())
        return { result: stored as T, replayed: true }
      }
      const outcome = claimOrWait(scope, key, fingerprint, fn)
      inflight.set(id, { fingerprint, outcome })
      // repeats here get the failure through their own await; this copy only must not go unhandled
      outcome.catch(() => {}).finally(() => inflight.delete(id))
      const { result, replayed } = await outcome
      return { result, replayed }
    },
    async purge(olderThanMs) {
      const { rowCount } = await pool.query(
        `DELETE FROM ${table} WHERE (state = 'done' AND completed_at < now() - $1::float8 * interval '1 millisecond')
           OR (state = 'running' AND locked_until < now() AND created_at < now() - $1::float8 * interval '1 millisecond')`,
        [olderThanMs],
      )
      return rowCount ?? 0
    },
    async close() {
      if (owned) await pool.end()
    },
  }
}

/** Purges the store's keys finished more than `olderThanMs` ago, once an hour; stop it before closing the store. */
export function startIdempotencyPurge(store: IdempotencyStore, log: Logger, olderThanMs: number): WorkerLoop {
  return startWorkerLoop({
    name: 'idempotency-purge',
    log,
    idleMs: 3600_000,
    round: async () => {
      await store.purge(olderThanMs)
      return false
    },
  })
}

/** Canonical JSON: object keys sorted, so equal requests fingerprint alike whatever their key order. */
function canonical(value: unknown): string | undefined {
  const plain = typeof (value as { toJSON?: unknown })?.toJSON === 'function' ? (value as { toJSON(): unknown }).toJSON() : value
  if (typeof plain === 'bigint') return JSON.stringify(plain.toString())
  if (Array.isArray(plain)) return `[${plain.map((item) => canonical(item) ?? 'null').join(',')}]`
  if (plain !== null && typeof plain === 'object') {
    const entries = Object.keys(plain)
      .sort()
      .flatMap((name) => {
        const item = canonical((plain as Record<string, unknown>)[name])
        return item === undefined ? [] : [`${JSON.stringify(name)}:${item}`]
      })
    return `{${entries.join(',')}}`
  }
  return JSON.stringify(plain)
}

/** SHA-256 (hex) of the request's canonical JSON; a bigint counts as its decimal string. */
export function fingerprintOf(value: unknown): string {
  return createHash('sha256')
    .update(canonical(value) ?? 'null')
    .digest('hex')
}

const keyPattern = /^[\x20-\x7e]{1,255}$/

/** The request's Idempotency-Key header: undefined when absent, a 400 when it is not 1..255 printable ASCII characters. */
export function idempotencyKeyOf(headers: Record<string, string | string[] | undefined>): string | undefined {
  const value = headers['idempotency-key']
  if (value === undefined) return undefined
  if (typeof value !== 'string' || !keyPattern.test(value)) throw new IdempotencyKeyInvalid()
  return value
}
