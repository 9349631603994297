import { blockedPayerCodec, type BlockedPayer } from '@ats/contracts'
import { firstLine, startWorkerLoop, type Logger } from '@ats/service-kit'
import type { KV } from 'nats'
import type { Ledger, PaymentRow } from './ledger.ts'
import type { AdminConfig } from '../service.ts'
import type { SettleOutcome, Settlement } from './settlement.ts'

/**
 * Settles recorded payments, oldest first, in batches of SETTLEMENT_BATCH_SIZE handed to the
 * settlement together, up to SETTLEMENT_PIPELINE_DEPTH batches in flight at once. Each payment's
 * outcome is its own: a transient failure is retried with backoff up to SETTLEMENT_MAX_ATTEMPTS,
 * then the payment is marked failed with the reason; a payer that could not pay is blocked (in
 * `blockedPayers`, which gateways refuse). A payment whose kept transaction may still be mined
 * (`inFlight`) is never given up: it is checked again (at least once a lease) until it is mined,
 * replaced or its authorization expired.
 */
export function startSettler(ledger: Ledger, settlement: Settlement, blockedPayers: KV, log: Logger, config: AdminConfig) {
  const { SETTLEMENT_INTERVAL_MS: intervalMs, SETTLEMENT_LEASE_MS: leaseMs, SETTLEMENT_BATCH_SIZE: batchSize } = config
  const backoffMs = (attempt: number) => Math.min(60_000, config.SETTLEMENT_RETRY_MS * 2 ** (attempt - 1))

  async function block(p: PaymentRow, reason: string) {
    const entry: BlockedPayer = { reason, since: Date.now() }
    await blockedPayers.put(p.payer.toLowerCase(), blockedPayerCodec.encode(entry))
    log.warn({ payer: p.payer, reason }, 'payer blocked: a payment of theirs could not settle')
  }

  async function record(p: PaymentRow, outcome: Exclude<SettleOutcome, { kind: 'settled' | 'later' }>) {
    const at = { paymentId: String(p.id), payer: p.payer, nonce: p.nonce, attempt: p.attempts }
    if (outcome.kind === 'failed' || (p.attempts >= config.SETTLEMENT_MAX_ATTEMPTS && !outcome.inFlight)) {
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

  log.info({ settlement: settlement.name, batchSize, pipelineDepth: config.SETTLEMENT_PIPELINE_DEPTH }, 'settling payments')
  const inFlight = new Set<Promise<void>>()
  const loop = startWorkerLoop({
    name: 'settler',
    log,
    idleMs: intervalMs,
    round: async () => {
      if (inFlight.size >= config.SETTLEMENT_PIPELINE_DEPTH) {
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
