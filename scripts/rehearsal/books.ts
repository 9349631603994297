// The rehearsals' books: the run's database and chain read back after the load, one Check each
// (charges, jobs, runs, swaps, settlement, errors, recovery, JetStream consumers); shared by
// scripts/rehearse.ts and scripts/rehearseUpgrade.ts.
import { writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { setTimeout as sleep } from 'node:timers/promises'
import type { NatsCluster } from '@ats/service-kit/testing'
import { createPublicClient, http, parseAbiItem, type Address } from 'viem'
import type { Devnet } from '../../packages/devnet/src/index.ts'
import { alive, procs, type Front } from './processes.ts'
import { latencyLines, ok2xx, samples } from './load.ts'

// pg is a dependency of the kit, not of the root package
const kitRequire = createRequire(new URL('../../packages/service-kit/package.json', import.meta.url))
export interface Pool {
  query(sql: string, params?: unknown[]): Promise<{ rows: unknown[] }>
  end(): Promise<void>
  on(event: 'error', listener: (error: Error) => void): void
}
export const pg = kitRequire('pg') as { Pool: new (options: { connectionString: string; max: number }) => Pool }

// ---------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------

const began = Date.now()
/** the run's clock: seconds since it began, now or at `epochMs` */
export const elapsed = (epochMs = Date.now()) => `${((epochMs - began) / 1000).toFixed(1)} s`
export const say = (line: string) => process.stdout.write(`[${elapsed().padStart(7)}] ${line}\n`)

/** the report's lines, as printed (REHEARSE_REPORT writes them to a file) */
export const report: string[] = []
export const out = (line: string) => {
  report.push(line)
  process.stdout.write(`${line}\n`)
}

export interface Check {
  name: string
  pass: boolean
  detail: string
  /** lines printed under it */
  more?: string[]
}

/** What the fronts answered themselves, then the latency of every phase: the end of a report's header. */
export function reportFrontsAndLatency(fronts: Front[]): void {
  const own = fronts.filter((f) => f.own.size > 0).map((f) => `${f.name}: ${[...f.own].map(([why, n]) => `${why} ${n}`).join(', ')}`)
  out(
    `the fronts' own doings (retried: a GET asked again of another replica after a reset; cut: dropped in flight, 502): ${own.length ? own.join('; ') : 'none'}`,
  )
  out('latency by phase (ms, every route):')
  for (const line of latencyLines()) out(line)
}

/**
 * One PASS or FAIL line a check (and its lines under it), then the verdict, the run's time and
 * where its logs are; the whole report also to REHEARSE_REPORT when set. Whether every check passed.
 */
export function concludeReport(checks: Check[], runDir: string): boolean {
  out('')
  for (const c of checks) {
    out(`${c.pass ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}`)
    for (const line of c.more ?? []) out(`        ${line}`)
  }
  out('')
  const failed = checks.filter((c) => !c.pass).length
  out(`${failed === 0 ? 'every check passed' : `${failed} check(s) failed`}; total time ${elapsed()}; logs in ${runDir}`)
  if (process.env.REHEARSE_REPORT) writeFileSync(process.env.REHEARSE_REPORT, `${report.join('\n')}\n`)
  return failed === 0
}

// ---------------------------------------------------------------------------------------------
// Helpers over the database and the chain
// ---------------------------------------------------------------------------------------------

let db: Pool | undefined
/** the run's database, as the superuser: the checks read every schema */
export const useDatabase = (pool: Pool) => {
  db = pool
}
export const q = async <T = Record<string, any>>(sql: string, params: unknown[] = []) => {
  if (!db) throw new Error('useDatabase was not called')
  return (await db.query(sql, params)).rows as T[]
}
export const count = async (sql: string) => (await q<{ n: number }>(sql))[0]!.n

export async function rpc<T>(url: string, method: string, params: unknown[]): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  })
  const body = (await res.json()) as { result?: T; error?: { message: string } }
  if (body.error) throw new Error(`${method}: ${body.error.message}`)
  return body.result as T
}

export async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number, everyMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(everyMs)
  }
}

export interface StreamState {
  name: string
  leader?: string
  /** copies configured */
  replicas: number
  /** every copy but the leader's is current and online */
  current: boolean
}

interface ConsumerDetail {
  name: string
  stream_name?: string
  config?: { durable_name?: string }
  num_pending?: number
  num_ack_pending?: number
  cluster?: { leader?: string }
}
interface StreamDetail {
  name: string
  config?: { num_replicas?: number }
  cluster?: { leader?: string; replicas?: Array<{ current?: boolean; offline?: boolean }> }
  consumer_detail?: ConsumerDetail[]
}

/** Each node's view of the streams (and their consumers), from its monitoring endpoint: no NATS user needed. */
async function streamViews(cluster: NatsCluster): Promise<StreamDetail[][]> {
  type Jsz = { account_details?: Array<{ stream_detail?: StreamDetail[] }> }
  return Promise.all(
    cluster.monitors.map(async (monitor) => {
      const jsz = (await fetch(`${monitor}/jsz?accounts=true&streams=true&consumers=true&config=true`).then(
        (r) => r.json(),
        () => undefined,
      )) as Jsz | undefined
      return (jsz?.account_details ?? []).flatMap((a) => a.stream_detail ?? [])
    }),
  )
}

/** The cluster's streams as their leaders show them: only a stream's leader knows whether its followers are current. */
export async function streamsOf(cluster: NatsCluster): Promise<StreamState[]> {
  const views = await streamViews(cluster)
  const names = new Set(views.flat().map((s) => s.name))
  return [...names].map((name) => {
    const any = views.flat().find((s) => s.name === name)!
    const leader = any.cluster?.leader
    const view = views[cluster.names.indexOf(leader ?? '')]?.find((s) => s.name === name) ?? any
    return {
      name,
      leader,
      replicas: view.config?.num_replicas ?? 1,
      current:
        view.cluster?.leader === leader &&
        (view.cluster?.replicas ?? []).length === (view.config?.num_replicas ?? 1) - 1 &&
        (view.cluster?.replicas ?? []).every((r) => r.current && !r.offline),
    }
  })
}

/** Why a route answered 503: the gateway's reasons for failing closed, by their message. */
export function whyClosed(answer: string): string {
  const reasons: Array<[RegExp, string]> = [
    [
      /payment verification is unavailable/,
      'paid routes fail closed without Redis: used nonces, payment ids and balance reservations live there, and a payment checked without them could be spent twice',
    ],
    [
      /payments cannot be recorded/,
      'paid routes fail closed while the payments stream takes no charges: an answer is given only when its charge can be recorded',
    ],
    [
      /API key verification is unavailable/,
      'keyed routes fail closed when admin does not answer a key lookup (NATS): an unverified key is not let through',
    ],
    [
      /the database is unavailable for a moment/,
      'what must be written to Postgres (a paid prompt becomes a job row) waits for it: 503, retryable, and the payment is not charged',
    ],
    [/service unavailable|did not answer in time/, 'the service behind the route did not answer: the gateway says so rather than wait'],
    [/no \S+ replica answers/, 'the front had no replica to send to'],
  ]
  return reasons.find(([pattern]) => pattern.test(answer))?.[1] ?? 'not one of the known reasons: see the logs'
}

/**
 * Waits (bounded) until every job and run has ended and every charge answered 2xx is in the
 * ledger; with `settlement`, also until no payment waits to be settled.
 */
export async function settle(charged: number, { settlement = false } = {}): Promise<void> {
  say(`waiting for every job and run to end and every charge to be recorded${settlement ? ' and settled' : ''}`)
  const waits: Array<[string, string, (n: number) => boolean, number]> = [
    [
      'jobs to end',
      `SELECT count(*)::int AS n FROM agent.jobs WHERE status NOT IN ('complete', 'failed', 'cancelled')`,
      (n) => n === 0,
      90_000,
    ],
    ['runs to end', `SELECT count(*)::int AS n FROM automation.automation_runs WHERE status = 'running'`, (n) => n === 0, 60_000],
    ['charges to be recorded', 'SELECT count(*)::int AS n FROM admin.payments', (n) => n >= charged, 30_000],
  ]
  if (settlement)
    waits.push([
      'payments to settle',
      `SELECT count(*)::int AS n FROM admin.payments WHERE state IN ('pending', 'settling', 'held')`,
      (n) => n === 0,
      90_000,
    ])
  for (const [what, sql, done, timeoutMs] of waits) {
    await until(what, async () => (done(await count(sql)) ? true : undefined), timeoutMs, 1000).catch((e: Error) => say(e.message))
  }
  await sleep(2000) // anything late, or twice
}

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

/** every answer charged is recorded once, and nothing uncharged is recorded (by payer nonce) */
export async function checkCharges(): Promise<Check> {
  const charged = new Set(samples.filter((s) => s.nonce && ok2xx(s)).map((s) => s.nonce!.toLowerCase()))
  const rows = await q<{ nonce: string; n: number }>('SELECT lower(nonce) AS nonce, count(*)::int AS n FROM admin.payments GROUP BY 1')
  const recorded = new Map(rows.map((r) => [r.nonce, r.n]))
  const missing = [...charged].filter((n) => !recorded.has(n))
  const twice = rows.filter((r) => r.n > 1)
  const bySample = new Map(samples.filter((s) => s.nonce).map((s) => [s.nonce!.toLowerCase(), s]))
  const uncharged = rows.filter((r) => !charged.has(r.nonce))
  const cut = uncharged.filter((r) => bySample.get(r.nonce)?.front === 'cut')
  // a paid request a gateway dropped in flight may have been charged without an answer: counted apart
  const states = await q<{ state: string; n: number }>('SELECT state::text, count(*)::int AS n FROM admin.payments GROUP BY 1 ORDER BY 1')
  return {
    name: 'every answer charged is recorded once, nothing uncharged recorded',
    pass: missing.length === 0 && twice.length === 0 && uncharged.length === 0,
    detail: `${charged.size} paid 2xx answers, ${rows.length} ledger rows (${states.map((s) => `${s.state} ${s.n}`).join(', ')}); missing ${missing.length}, twice ${twice.length}, recorded without a 2xx ${uncharged.length}${cut.length ? ` (${cut.length} of them dropped in flight by a gateway)` : ''}`,
  }
}

/** One line per reason `held` gives: the one id and how it ended, or how many of them ended well. */
function heldSummary(held: Map<string, string>, ended: (id: string) => string, good: (id: string) => boolean, goodName: string): string[] {
  const byWhy = new Map<string, string[]>()
  for (const [id, why] of held) byWhy.set(why, [...(byWhy.get(why) ?? []), id])
  return [...byWhy].map(([why, ids]) =>
    ids.length === 1 ? `${why} ${ids[0]}: ${ended(ids[0]!)}` : `${why}: ${ids.length}, ${ids.filter(good).length} ${goodName}`,
  )
}

/**
 * every job accepted (202) ended once, complete, with its payment's outcome to match; `held`:
 * jobs that must be among them, complete, by why they matter (a killed worker's, those running
 * when a worker was stopped)
 */
export async function checkJobs(held: Map<string, string> = new Map()): Promise<Check> {
  const rows = await q<{ id: string; status: string; attempts: number; ends: number; payment_outcome: string | null }>(
    `SELECT j.id, j.status::text, j.attempts, j.payment_outcome,
      (SELECT count(*)::int FROM agent.job_events e WHERE e.job_id = j.id AND e.type = 'status' AND e.data->>'status' IN ('complete', 'failed', 'cancelled')) AS ends
     FROM agent.jobs j`,
  )
  const byId = new Map(rows.map((r) => [r.id, r]))
  const accepted = new Set(samples.filter((s) => s.jobId).map((s) => s.jobId!))
  const statusOf = (id: string) => byId.get(id)?.status ?? 'lost'
  const lost = [...accepted].filter((id) => !byId.has(id))
  const notComplete = [...accepted].filter((id) => byId.has(id) && statusOf(id) !== 'complete')
  const endedTwice = rows.filter((r) => r.ends > 1)
  const outcomeWrong = rows.filter((r) => (r.status === 'complete' ? r.payment_outcome !== 'charge' : r.payment_outcome !== 'void'))
  const unaccepted = rows.filter((r) => !accepted.has(r.id))
  const heldNotComplete = [...held.keys()].filter((id) => statusOf(id) !== 'complete')
  const statuses = [...new Set([...accepted].map(statusOf))].map((s) => `${s} ${[...accepted].filter((id) => statusOf(id) === s).length}`)
  const heldLines = heldSummary(
    held,
    (id) => `${statusOf(id)} after ${byId.get(id)?.attempts ?? 0} runs`,
    (id) => statusOf(id) === 'complete',
    'complete',
  )
  return {
    name: 'every job accepted completes exactly once',
    pass:
      lost.length === 0 && notComplete.length === 0 && endedTwice.length === 0 && outcomeWrong.length === 0 && heldNotComplete.length === 0,
    detail: `${accepted.size} jobs accepted (${statuses.join(', ')}); ended twice ${endedTwice.length}; payment outcome not matching ${outcomeWrong.length}; ${unaccepted.length} jobs whose 202 was cut${heldLines.length === 1 ? `; ${heldLines[0]}` : ''}`,
    more: [...(heldLines.length > 1 ? heldLines : []), ...notComplete.slice(0, 5).map((id) => `not complete: ${id} (${statusOf(id)})`)],
  }
}

export type Execution = { id: string; tx_hash: string | null; idempotency_key: string | null; automation_run_id: string | null }
export const executionsOf = () => q<Execution>('SELECT id, tx_hash, idempotency_key, automation_run_id FROM trading.executions')

/**
 * each automation's due time ran once, each run made one swap at most, none is left running;
 * `held`: runs that must have succeeded, by why they matter (a killed scheduler's, those running
 * when a scheduler was stopped)
 */
export async function checkRuns(executions: Execution[], held: Map<string, string> = new Map()): Promise<Check> {
  const runs = await q<{ id: string; due: string; status: string; tx_hash: string | null; attempts: number; started_at: Date | null }>(
    `SELECT id, automation_id || '@' || scheduled_for::text AS due, status::text, tx_hash, attempts, started_at FROM automation.automation_runs`,
  )
  const dues = new Map<string, number>()
  for (const r of runs) dues.set(r.due, (dues.get(r.due) ?? 0) + 1)
  const swapsOf = new Map<string, Execution[]>()
  for (const e of executions) if (e.automation_run_id) swapsOf.set(e.automation_run_id, [...(swapsOf.get(e.automation_run_id) ?? []), e])
  const dueTwice = [...dues.values()].filter((n) => n > 1).length
  const twice = runs.filter((r) => (swapsOf.get(r.id)?.length ?? 0) > 1)
  const running = runs.filter((r) => r.status === 'running')
  const successWithoutSwap = runs.filter((r) => r.status === 'success' && !swapsOf.get(r.id)?.some((e) => e.tx_hash === r.tx_hash))
  const byId = new Map(runs.map((r) => [r.id, r]))
  const heldFailed = [...held.keys()].filter((id) => byId.get(id)?.status !== 'success')
  const heldLines = heldSummary(
    held,
    (id) => `${byId.get(id)?.status ?? 'missing'} after ${byId.get(id)?.attempts ?? 0} tries`,
    (id) => byId.get(id)?.status === 'success',
    'success',
  )
  const statuses = [...new Set(runs.map((r) => r.status))].map((s) => `${s} ${runs.filter((r) => r.status === s).length}`)
  return {
    name: 'every automation run happens once',
    pass:
      runs.length > 0 &&
      dueTwice === 0 &&
      twice.length === 0 &&
      running.length === 0 &&
      successWithoutSwap.length === 0 &&
      heldFailed.length === 0,
    detail: `${runs.length} runs (${statuses.join(', ')}); due times run twice ${dueTwice}; runs with two executions ${twice.length}; success without its swap ${successWithoutSwap.length}; left running ${running.length}${heldLines.length === 1 ? `; ${heldLines[0]}` : ''}`,
    more: [
      ...(heldLines.length > 1 ? heldLines : []),
      ...[...running, ...successWithoutSwap]
        .slice(0, 10)
        .map(
          (r) =>
            `${r.status === 'running' ? 'left running' : 'success without its swap'}: ${r.id} (started ${r.started_at ? elapsed(r.started_at.getTime()) : 'never'}, ${r.attempts} tries, tx ${r.tx_hash ?? 'none'})`,
        ),
    ],
  }
}

/** the server wallet's transactions since `startBlock` (those to a token are approvals or settlements), by hash, lower-case */
async function serverWalletTransactions(
  devnet: Devnet,
  startBlock: number,
): Promise<Array<{ hash: string; to: string; toToken: boolean; at: number }>> {
  const server = devnet.accounts[0]!.address.toLowerCase()
  const tokens = new Set(devnet.book.tokens.map((t) => t.address.toLowerCase()))
  const latest = Number(await rpc<string>(devnet.rpcUrl, 'eth_blockNumber', []))
  const sent: Array<{ hash: string; to: string; toToken: boolean; at: number }> = []
  for (let n = startBlock; n <= latest; n++) {
    const block = await rpc<{ timestamp: string; transactions: Array<{ hash: string; from: string; to: string | null }> }>(
      devnet.rpcUrl,
      'eth_getBlockByNumber',
      [`0x${n.toString(16)}`, true],
    )
    for (const tx of block.transactions)
      if (tx.from.toLowerCase() === server && tx.to) {
        const to = tx.to.toLowerCase()
        sent.push({ hash: tx.hash.toLowerCase(), to, toToken: tokens.has(to), at: Number(block.timestamp) * 1000 })
      }
  }
  return sent
}

/**
 * Every swap the server wallet sent on chain (its transactions since the load began, but those to
 * a token, approvals, and the `settlements` admin sent) is one execution's, and no two
 * executions share one.
 */
export async function checkSwaps(
  devnet: Devnet,
  startBlock: number,
  executions: Execution[],
  settlements = new Set<string>(),
): Promise<Check> {
  const swaps = (await serverWalletTransactions(devnet, startBlock)).filter((tx) => !tx.toToken && !settlements.has(tx.hash))
  const sent = swaps.map((tx) => tx.hash)
  const hashes = new Map<string, number>()
  for (const e of executions) if (e.tx_hash) hashes.set(e.tx_hash.toLowerCase(), (hashes.get(e.tx_hash.toLowerCase()) ?? 0) + 1)
  const keys = new Map<string, number>()
  for (const e of executions) if (e.idempotency_key) keys.set(e.idempotency_key, (keys.get(e.idempotency_key) ?? 0) + 1)
  const stray = sent.filter((h) => !hashes.has(h))
  const shared = [...hashes.values()].filter((n) => n > 1).length
  const keyTwice = [...keys.values()].filter((n) => n > 1).length
  return {
    name: 'no swap is sent twice',
    pass: stray.length === 0 && shared === 0 && keyTwice === 0,
    detail: `${sent.length} swap transactions from the server wallet on chain, ${executions.length} executions (${hashes.size} with a transaction); on chain without an execution ${stray.length}; executions sharing a transaction ${shared}; idempotency keys used twice ${keyTwice}`,
    more: swaps
      .filter((tx) => stray.includes(tx.hash))
      .slice(0, 10)
      .map((tx) => `on chain without an execution: ${tx.hash} to ${tx.to}, mined at ${elapsed(tx.at)}`),
  }
}

const authorizationUsed = parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)')
const balanceOfAbi = [parseAbiItem('function balanceOf(address owner) view returns (uint256)')] as const

/** The settlement transactions admin sent: every payment's transaction, lower-case. */
export const settlementTransactions = async () =>
  new Set(
    (await q<{ hash: string }>('SELECT DISTINCT lower(tx_hash) AS hash FROM admin.payments WHERE tx_hash IS NOT NULL')).map((r) => r.hash),
  )

/**
 * With settlement on: every payment in the ledger is settled, and settled exactly once on chain.
 * Each one's authorization (payer, nonce) was used on chain once (AuthorizationUsed), in the very
 * transaction its row names; no authorization of the payers was used that the ledger does not
 * hold; PAY_TO received the sum of the settled payments since `startBlock`, no more.
 */
export async function checkSettlement(devnet: Devnet, startBlock: number, payTo: Address, payers: Address[]): Promise<Check> {
  const client = createPublicClient({ transport: http(devnet.rpcUrl) })
  const usdc = devnet.book.tokens.find((t) => t.symbol === 'USDC')!.address as Address
  const rows = await q<{ key: string; state: string; tx_hash: string | null; amount: string }>(
    `SELECT lower(payer) || ':' || lower(nonce) AS key, state::text, lower(tx_hash) AS tx_hash, amount::text FROM admin.payments`,
  )
  const logs = await client.getLogs({
    address: usdc,
    event: authorizationUsed,
    args: { authorizer: payers },
    fromBlock: BigInt(startBlock),
  })
  const used = new Map<string, string[]>()
  for (const log of logs) {
    const key = `${log.args.authorizer!.toLowerCase()}:${log.args.nonce!.toLowerCase()}`
    used.set(key, [...(used.get(key) ?? []), log.transactionHash!.toLowerCase()])
  }
  const byKey = new Map(rows.map((r) => [r.key, r]))
  const unsettled = rows.filter((r) => r.state !== 'settled')
  const notOnChain = rows.filter((r) => r.state === 'settled' && !used.has(r.key))
  const usedTwice = [...used.values()].filter((hashes) => hashes.length > 1).length
  const otherTransaction = rows.filter((r) => r.state === 'settled' && used.has(r.key) && !used.get(r.key)!.includes(r.tx_hash ?? ''))
  const unknown = [...used.keys()].filter((key) => !byKey.has(key))
  const settledSum = rows.filter((r) => r.state === 'settled').reduce((sum, r) => sum + BigInt(r.amount), 0n)
  const balance = (blockNumber?: bigint) =>
    client.readContract({
      address: usdc,
      abi: balanceOfAbi,
      functionName: 'balanceOf',
      args: [payTo],
      ...(blockNumber === undefined ? {} : { blockNumber }),
    })
  const received = (await balance()) - (await balance(BigInt(startBlock)))
  const transactions = new Set([...used.values()].flat())
  const receipts = await Promise.all([...transactions].map((hash) => client.getTransactionReceipt({ hash: hash as `0x${string}` })))
  const reverted = receipts.filter((r) => r.status !== 'success').length
  const states = [...new Set(unsettled.map((r) => r.state))].map((s) => `${s} ${unsettled.filter((r) => r.state === s).length}`)
  return {
    name: 'every payment recorded is settled exactly once on chain',
    pass:
      rows.length > 0 &&
      unsettled.length === 0 &&
      notOnChain.length === 0 &&
      usedTwice === 0 &&
      otherTransaction.length === 0 &&
      unknown.length === 0 &&
      received === settledSum &&
      reverted === 0,
    detail: `${rows.length} ledger rows, ${rows.length - unsettled.length} settled${states.length ? ` (not: ${states.join(', ')})` : ''}; ${used.size} authorizations used on chain in ${transactions.size} transactions (${reverted} reverted); settled but not on chain ${notOnChain.length}, used twice ${usedTwice}, in another transaction than the ledger's ${otherTransaction.length}, used without a ledger row ${unknown.length}; PAY_TO received ${received} of ${settledSum} settled`,
  }
}

/**
 * every answer under load that was not 2xx was a 503 with {error}, grouped with the reason;
 * requests a backend dropped in flight (the front's 502) are allowed with `cutsAllowed` alone
 * (a gateway SIGKILLed), otherwise they fail it
 */
export function checkErrors({ cutsAllowed = true, during = 'the faults' } = {}): Check {
  const underLoad = samples.filter((s) => !s.final)
  const errors = underLoad.filter((s) => !ok2xx(s))
  const cut = errors.filter((s) => s.front === 'cut')
  const answered = errors.filter((s) => s.front !== 'cut')
  const bad = answered.filter((s) => s.status !== 503 || !s.jsonError)
  const groups = new Map<string, number>()
  for (const s of answered) {
    const key = `${s.phase}: ${s.route} ${s.status || 'no answer'} ${s.error?.replace(/0x[0-9a-f]+/gi, '0x…').slice(0, 140) ?? ''}`
    groups.set(key, (groups.get(key) ?? 0) + 1)
  }
  return {
    name: `error answers during ${during} were 503 with {error}`,
    pass: bad.length === 0 && (cutsAllowed || cut.length === 0),
    detail: `${underLoad.length} requests under load, ${errors.length} not 2xx: ${answered.length} answered by the fleet (${bad.length} not 503 {error}), ${cut.length} dropped in flight by a gateway (the front answered 502)`,
    more: [
      ...[...groups].sort().flatMap(([key, n]) => [`${n} x ${key}`, `    why: ${whyClosed(key)}`]),
      ...cut.map((s) => `dropped: ${s.phase}: ${s.route} (${s.error})`),
    ],
  }
}

/** the final round all 2xx, no process down that was not stopped on purpose, every stream with 3 current copies */
export async function checkRecovery(cluster: NatsCluster): Promise<Check> {
  const finalRound = samples.filter((s) => s.final)
  const failed = finalRound.filter((s) => !ok2xx(s))
  const dead = procs.filter((p) => !p.killedOnPurpose && !alive(p.child)).map((p) => p.name)
  // a follower that was down catches up within seconds; give it that
  let streams = await streamsOf(cluster)
  for (let i = 0; i < 40 && streams.some((s) => s.replicas !== 3 || !s.current); i++) {
    await sleep(500)
    streams = await streamsOf(cluster)
  }
  const lagging = streams.filter((s) => s.replicas !== 3 || !s.current).map((s) => s.name)
  const failures = [...new Set(failed.map((s) => `${s.route} ${s.status} ${s.error}`))].slice(0, 3)
  return {
    name: 'the fleet recovers without a restart by hand',
    pass: finalRound.length > 0 && failed.length === 0 && dead.length === 0 && lagging.length === 0,
    detail: `final round ${finalRound.length - failed.length}/${finalRound.length} 2xx${failures.length ? ` (${failures.join('; ')})` : ''}; processes down that were not killed: ${dead.length ? dead.join(', ') : 'none'}; ${streams.length} streams with 3 current replicas${lagging.length ? `, not: ${lagging.join(', ')}` : ''}`,
  }
}

/**
 * The checks of the books both rehearsals make, in this order: charges, jobs, runs, swaps,
 * errors, recovery. `jobs` and `runs`: those that must have ended well, by why (checkJobs,
 * checkRuns); `settlements`: admin's settlement transactions, when it settles (checkSwaps).
 */
export async function checkBooks(options: {
  devnet: Devnet
  startBlock: number
  cluster: NatsCluster
  jobs?: Map<string, string>
  runs?: Map<string, string>
  settlements?: Set<string>
  errors?: Parameters<typeof checkErrors>[0]
}): Promise<Check[]> {
  const executions = await executionsOf()
  return [
    await checkCharges(),
    await checkJobs(options.jobs),
    await checkRuns(executions, options.runs),
    await checkSwaps(options.devnet, options.startBlock, executions, options.settlements),
    checkErrors(options.errors),
    await checkRecovery(options.cluster),
  ]
}

/**
 * No JetStream consumer stuck: every durable consumer of the namespace's streams has delivered
 * everything (num_pending 0) and had it acknowledged (num_ack_pending 0), as its leader sees
 * it, within `timeoutMs`: a consumer no process reads any more (one only the old release used)
 * or messages a new reader refuses would stay behind.
 */
export async function checkConsumers(cluster: NatsCluster, namespace: string, timeoutMs = 60_000): Promise<Check> {
  const started = Date.now()
  type Seen = { stream: string; name: string; pending: number; ackPending: number }
  const look = async (): Promise<Seen[]> => {
    const views = await streamViews(cluster)
    const seen = new Map<string, Seen>()
    views.forEach((view, node) => {
      for (const stream of view.filter((s) => s.name.startsWith(`${namespace}_`))) {
        for (const c of stream.consumer_detail ?? []) {
          if (!c.config?.durable_name) continue
          const key = `${stream.name}/${c.name}`
          // the consumer's leader's view wins; any node's until it is seen
          if (c.cluster?.leader && c.cluster.leader !== cluster.names[node] && seen.has(key)) continue
          seen.set(key, { stream: stream.name, name: c.name, pending: c.num_pending ?? 0, ackPending: c.num_ack_pending ?? 0 })
        }
      }
    })
    return [...seen.values()]
  }
  let consumers = await look()
  while (consumers.some((c) => c.pending > 0 || c.ackPending > 0) && Date.now() - started < timeoutMs) {
    await sleep(1000)
    consumers = await look()
  }
  const stuck = consumers.filter((c) => c.pending > 0 || c.ackPending > 0)
  const streams = new Set(consumers.map((c) => c.stream))
  return {
    name: 'no JetStream consumer stuck',
    pass: consumers.length > 0 && stuck.length === 0,
    detail: `${consumers.length} durable consumers on ${streams.size} streams of ${namespace}: ${stuck.length ? `${stuck.length} not drained within ${timeoutMs / 1000} s` : `every one drained (num_pending and num_ack_pending 0) ${((Date.now() - started) / 1000).toFixed(1)} s after the load`}`,
    more: stuck.map((c) => `stuck: ${c.stream}/${c.name}: num_pending ${c.pending}, num_ack_pending ${c.ackPending}`),
  }
}
