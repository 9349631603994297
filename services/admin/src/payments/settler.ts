import { blockedPayerCodec, type BlockedPayer } from '@ats/contracts'
import { firstLine, startWorkerLoop, type Logger } from '@ats/service-kit'
import type { KV } from 'nats'
import type { Ledger, PaymentRow } from './ledger.ts'
import type { SettleOutcome, Settlement } from './settlement.ts'

export interface SettlerOptions {
  ledger: Ledger
  settlement: Settlement
  /** where payers whose payment could not settle for lack of funds are written; gateways refuse them */
  blockedPayers: KV
  log: Logger
  intervalMs: number
  maxAttempts: number
  /** how long a claimed payment stays with its settler before another (or a restarted one) may take it */
  leaseMs: number
  /** the delay before the first retry of a transient failure; it doubles with each attempt, up to 60 s */
  retryMs: number
  /** payments claimed and settled together */
  batchSize: number
  /** batches in flight at once: the next is claimed, signed and broadcast while earlier ones wait for their receipts */
  pipelineDepth: number
}

/**
 * Settles recorded payments, oldest first, in batches: each round claims up to `batchSize` due
 * payments and hands them to the settlement together (on chain: one transaction for the batch, a
 * payer's payments side by side as far as its balance covers them). Up to `pipelineDepth` batches
 * are in flight at once: the claim loop takes the next batch while earlier ones wait for their
 * receipts (their transactions take the server wallet's nonces in turn under the wallet sender's
 * lock, held only until the broadcast). Each payment's outcome is its own: a transient failure is
 * retried with backoff up to `maxAttempts`, then the payment is marked failed with the reason; a
 * payer that could not pay is blocked. A payment whose kept transaction may still be mined
 * (`inFlight`) is never given up: it is checked again (at least once a lease) until it is mined,
 * replaced or its authorization expired. A batch is one attempt, and it ends inside the lease
 * (each receipt wait is a third of it at most).
 */
export function startSettler({
  ledger,
  settlement,
  blockedPayers,
  log,
  intervalMs,
  maxAttempts,
  leaseMs,
  retryMs,
  batchSize,
  pipelineDepth,
}: SettlerOptions) {
  const backoffMs = (attempt: number) => Math.min(60_000, retryMs * 2 ** (attempt - 1))

  async function block(p: PaymentRow, reason: string) {
    const entry: BlockedPayer = { reason, since: Date.now() }
    await blockedPayers.put(p.payer.toLowerCase(), blockedPayerCodec.encode(entry))
    log.warn({ payer: p.payer, reason }, 'payer blocked: a payment of theirs could not settle')
  }

  async function record(p: PaymentRow, outcome: Exclude<SettleOutcome, { kind: 'settled' | 'later' }>) {
    const at = { paymentId: String(p.id), payer: p.payer, nonce: p.nonce, attempt: p.attempts }
    if (outcome.kind === 'failed' || (p.attempts >= maxAttempts && !outcome.inFlight)) {
      const reason = outcome.kind === 'failed' ? outcome.reason : `gave up after ${p.attempts} attempts: ${outcome.reason}`
      await ledger.failed(p.id, reason)
      log.error({ ...at, reason }, 'payment settlement failed')
      if (outcome.kind === 'failed' && outcome.blockPayer) await block(p, reason)
    } else {
      // a transaction in flight is looked at again at least once a lease
      await ledger.retryLater(p.id, outcome.reason, outcome.inFlight ? Math.min(backoffMs(p.attempts), leaseMs) : backoffMs(p.attempts))
      log.warn({ ...at, reason: outcome.reason }, 'payment settlement will be retried')
    }
  }

  async function settleBatch(payments: PaymentRow[]) {
    let outcomes: SettleOutcome[]
    try {
      outcomes = await settlement.settle(payments, {
        onSigned: (rows, tx) =>
          ledger.signed(
            rows.map((p) => p.id),
            tx,
          ),
      })
    } catch (error) {
      // a payment with a kept transaction stays in flight whatever the error: it may be mined
      outcomes = payments.map((p) => ({ kind: 'retry', reason: firstLine(error), inFlight: Boolean(p.rawTx) }))
    }
    const settled: Array<{ id: bigint; txHash: string }> = []
    const later: PaymentRow[] = []
    for (const [i, p] of payments.entries()) {
      const outcome = outcomes[i]!
      if (outcome.kind === 'settled') settled.push({ id: p.id, txHash: outcome.txHash })
      else if (outcome.kind === 'later') later.push(p)
      else await record(p, outcome)
    }
    await ledger.settled(settled)
    await ledger.release(
      later.map((p) => p.id),
      intervalMs,
    )
    const transactions = new Set(settled.map((s) => s.txHash))
    if (settled.length > 0) log.info({ payments: settled.length, transactions: [...transactions] }, 'payments settled')
  }

  log.info({ settlement: settlement.name, batchSize, pipelineDepth }, 'settling payments')
  const inFlight = new Set<Promise<void>>()
  const loop = startWorkerLoop({
    name: 'settler',
    log,
    idleMs: intervalMs,
    round: async () => {
      if (inFlight.size >= pipelineDepth) {
        // every slot taken: claim again as soon as a batch ends
        await Promise.race(inFlight)
        return true
      }
      const due = await ledger.claimDue(batchSize, leaseMs)
      if (due.length === 0) return false
      const batch: Promise<void> = settleBatch(due)
        .catch((error) =>
          log.error({ err: error, payments: due.length }, 'settling a batch failed; its payments are taken up after their lease'),
        )
        .finally(() => inFlight.delete(batch))
      inFlight.add(batch)
      return due.length === batchSize
    },
  })
  return {
    async stop() {
      await loop.stop()
      await Promise.all(inFlight)
    },
  }
}
