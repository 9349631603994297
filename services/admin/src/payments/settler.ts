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
  batchSize?: number
}

/** how long a claimed payment stays with its settler before another may take it */
const leaseMs = 120_000
const backoffMs = (attempt: number) => Math.min(60_000, 1_000 * 2 ** (attempt - 1))

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
 * payment is marked failed with the reason; a payer that could not pay is blocked.
 */
export function startSettler({ ledger, settlement, blockedPayers, log, intervalMs, maxAttempts, batchSize = 25 }: SettlerOptions) {
  async function block(p: PaymentRow, reason: string) {
    const entry: BlockedPayer = { reason, since: Date.now() }
    await blockedPayers.put(p.payer.toLowerCase(), blockedPayerCodec.encode(entry))
    log.warn({ payer: p.payer, reason }, 'payer blocked: a payment of theirs could not settle')
  }

  async function settleOne(p: PaymentRow) {
    let outcome: SettleOutcome
    try {
      outcome = await settlement.settle(p, (txHash) => ledger.submitted(p.id, txHash))
    } catch (error) {
      outcome = { kind: 'retry' as const, reason: (error as Error).message.split('\n')[0]! }
    }
    const at = { paymentId: String(p.id), payer: p.payer, nonce: p.nonce, attempt: p.attempts }
    if (outcome.kind === 'settled') {
      await ledger.settled(p.id, outcome.txHash)
      log.info({ ...at, txHash: outcome.txHash }, 'payment settled')
    } else if (outcome.kind === 'failed' || p.attempts >= maxAttempts) {
      const reason = outcome.kind === 'failed' ? outcome.reason : `gave up after ${p.attempts} attempts: ${outcome.reason}`
      await ledger.failed(p.id, reason)
      log.error({ ...at, reason }, 'payment settlement failed')
      if (outcome.kind === 'failed' && outcome.insufficientFunds) await block(p, reason)
    } else {
      await ledger.retryLater(p.id, outcome.reason, backoffMs(p.attempts))
      log.warn({ ...at, reason: outcome.reason }, 'payment settlement will be retried')
    }
  }

  log.info({ settlement: settlement.name }, 'settling payments')
  return startWorkerLoop({
    name: 'settler',
    log,
    idleMs: intervalMs,
    round: async () => {
      const due = await ledger.claimDue(batchSize, leaseMs)
      const settlePayer = async (payments: PaymentRow[]) => {
        for (const p of payments) await settleOne(p)
      }
      await Promise.all([...byPayer(due).values()].map(settlePayer))
      return due.length === batchSize
    },
  })
}
