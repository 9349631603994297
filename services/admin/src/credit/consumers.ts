// The ledger's two durable consumers of the credit stream: the gateways' debits and the metered services' usage reports.
import type { creditChannels } from '@ats/contracts'
import { startDurableConsumer, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { CreditLedger } from './creditLedger.ts'

type CreditChannels = ReturnType<typeof creditChannels>

/** Prisma puts the cause on the last line of its message: that is the reason worth keeping. */
function failure(what: string, error: unknown): Error {
  const lines = (error instanceof Error ? error.message : String(error)).split('\n').map((l) => l.trim())
  return new Error(`${what} failed: ${lines.filter(Boolean).at(-1) ?? 'unknown error'}`, { cause: error })
}

/**
 * Debits (and holds and withdrawals) as gateways publish them, recorded in one transaction a batch:
 * a message is acked once its debits are committed, and the unique (wallet, kind, ref) makes a
 * redelivery harmless. A batch that keeps failing goes to the dead letters after bounded tries.
 */
export function startDebitConsumer(nc: NatsConnection, channels: CreditChannels, ledger: CreditLedger, log: Logger, retryDelayMs: number) {
  return startDurableConsumer({
    nc,
    log,
    stream: channels.streamSpec,
    durable: channels.debitConsumer,
    topic: channels.debited,
    deadLetterSubject: channels.deadLetters,
    maxDeliveries: 3,
    retryDelayMs,
    batchSize: 256,
    // one transaction a batch: on a busy stream a batch fills over 20 ms, so fewer transactions record more debits each
    lingerMs: 20,
    handle: async (batch) => {
      const debits = batch.flatMap((d) => d.message.debits)
      const recorded = await ledger.recordDebits(debits).catch((error: unknown) => {
        throw failure(`recording ${debits.length} credit debits`, error)
      })
      if (recorded > 0) log.debug({ recorded, received: debits.length }, 'credit debits recorded')
    },
  })
}

/**
 * Usage reports of metered work: each closes its hold (what it kept captured, the rest released
 * and published to the gateways). A report whose hold is not recorded yet waits in the ledger for
 * it, so the order in which the two streams' messages arrive does not matter.
 */
export function startUsageConsumer(nc: NatsConnection, channels: CreditChannels, ledger: CreditLedger, log: Logger, retryDelayMs: number) {
  return startDurableConsumer({
    nc,
    log,
    stream: channels.streamSpec,
    durable: channels.usageConsumer,
    topic: channels.usage,
    deadLetterSubject: channels.deadLetters,
    maxDeliveries: 3,
    retryDelayMs,
    batchSize: 256,
    lingerMs: 5,
    handle: async (batch) => {
      const reports = batch.map((d) => d.message)
      const { closed, waiting, ignored } = await ledger.recordUsage(reports).catch((error: unknown) => {
        throw failure(`recording ${reports.length} credit usage reports`, error)
      })
      if (ignored.length > 0) log.warn({ ignored }, 'usage reports of holds already closed: the first report (or the hold timeout) stands')
      if (closed + waiting > 0) log.debug({ closed, waiting }, 'credit usage recorded')
    },
  })
}
