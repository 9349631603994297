import { blockedPayerCodec, type BlockedPayer } from '@ats/contracts'
import { startWorkerLoop, type Logger } from '@ats/service-kit'
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
  batchSize?: number
}

/** Payments grouped by payer, oldest first within each. */
function byPayer(payments: PaymentRow[]): Map<string, PaymentRow[]> {
  const groups = new Map<string, PaymentRow[]>()
  for (const p of payments) groups.set(p.payer, [...(groups.get(p.payer) ?? []), p])
  return groups
}

/**
 * Settles recorded payments, oldest first: payers in parallel (transactions from the one
 * server wallet take their nonces under the wallet sender's lock, held only until the broadcast,
 * so none waits for another to be mined), each payer's payments one after another, so that a payer who cannot cover them
 * all is caught by the balance check before a transaction is sent. A transient failure is retried with backoff up to `maxAttempts`, then the
 * payment is marked failed with the reason; a payer that could not pay is blocked. A payment whose
 * kept transaction may still be mined (`inFlight`) is never given up: it is checked again (at
 * least once a lease) until it is mined, replaced or its authorization expired.
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
  batchSize = 25,
}: SettlerOptions) {
  const backoffMs = (attempt: number) => Math.min(60_000, retryMs * 2 ** (attempt - 1))

  async function block(p: PaymentRow, reason: string) {
    const entry: BlockedPayer = { reason, since: Date.now() }
    await blockedPayers.put(p.payer.toLowerCase(), blockedPayerCodec.encode(entry))
    log.warn({ payer: p.payer, reason }, 'payer blocked: a payment of theirs could not settle')
  }

  async function settleOne(p: PaymentRow) {
    let outcome: SettleOutcome
    try {
      outcome = await settlement.settle(p, { onSigned: (tx) => ledger.signed(p.id, tx) })
    } catch (error) {
      // a payment with a kept transaction stays in flight whatever the error: it may be mined
      outcome = { kind: 'retry' as const, reason: (error as Error).message.split('\n')[0]!, inFlight: Boolean(p.rawTx) }
    }
    const at = { paymentId: String(p.id), payer: p.payer, nonce: p.nonce, attempt: p.attempts }
    if (outcome.kind === 'settled') {
      await ledger.settled(p.id, outcome.txHash)
      log.info({ ...at, txHash: outcome.txHash }, 'payment settled')
    } else if (outcome.kind === 'failed' || (p.attempts >= maxAttempts && !outcome.inFlight)) {
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

  log.info({ settlement: settlement.name }, 'settling payments')
  return startWorkerLoop({
    name: 'settler',
    log,
    idleMs: intervalMs,
    round: async () => {
      const claimedAt = Date.now()
      const due = await ledger.claimDue(batchSize, leaseMs)
      const settlePayer = async (payments: PaymentRow[]) => {
        for (const [i, p] of payments.entries()) {
          // an attempt (its receipt wait is a third of the lease at most) must end inside the
          // lease, or another settler could take the payment meanwhile: past a third of it,
          // the payer's remaining payments go back, due at once
          if (Date.now() - claimedAt > leaseMs / 3) {
            await ledger.release(payments.slice(i).map((rest) => rest.id))
            return
          }
          await settleOne(p)
        }
      }
      await Promise.all([...byPayer(due).values()].map(settlePayer))
      return due.length === batchSize
    },
  })
}
