// The ledgers' durable consumers: the gateways' debits and the metered services' usage reports on
// the credit stream, and (payments/ledgerConsumer.ts) charged payments on the payments stream.
import type { creditChannels } from '@ats/contracts'
import { startDurableConsumer, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { CreditLedger } from './creditLedger.ts'

type CreditChannels = ReturnType<typeof creditChannels>

/** What a ledger's consumers share: batches of up to 256 recorded together, three tries `retryDelayMs` apart, then the dead letters. */
export const recorderOptions = (channels: Pick<CreditChannels, 'streamSpec' | 'deadLetters'>, retryDelayMs: number) => ({
  stream: channels.streamSpec,
  deadLetterSubject: channels.deadLetters,
  maxDeliveries: 3,
  retryDelayMs,
  batchSize: 256,
})

/** Records a batch; a failure keeps the cause, which Prisma puts on the last line of its message. */
export async function recording<T>(what: string, record: Promise<T>): Promise<T> {
  try {
    return await record
  } catch (error) {
    const lines = (error instanceof Error ? error.message : String(error)).split('\n').map((l) => l.trim())
    throw new Error(`${what} failed: ${lines.filter(Boolean).at(-1) ?? 'unknown error'}`, { cause: error })
  }
}

/** Debits (and holds and withdrawals) as gateways publish them; the unique (wallet, kind, ref) makes a redelivery harmless. */
export function startDebitConsumer(nc: NatsConnection, channels: CreditChannels, ledger: CreditLedger, log: Logger, retryDelayMs: number) {
  return startDurableConsumer({
    nc,
    log,
    ...recorderOptions(channels, retryDelayMs),
    durable: channels.debitConsumer,
    topic: channels.debited,
    // one transaction a batch: on a busy stream a batch fills over 20 ms, so fewer transactions record more debits each
    lingerMs: 20,
    handle: async (batch) => {
      const debits = batch.flatMap((d) => d.message.debits)
      const recorded = await recording(`recording ${debits.length} credit debits`, ledger.recordDebits(debits))
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
    ...recorderOptions(channels, retryDelayMs),
    durable: channels.usageConsumer,
    topic: channels.usage,
    lingerMs: 5,
    handle: async (batch) => {
      const reports = batch.map((d) => d.message)
      const { closed, waiting, ignored } = await recording(`recording ${reports.length} credit usage reports`, ledger.recordUsage(reports))
      if (ignored.length > 0) log.warn({ ignored }, 'usage reports of holds already closed: the first report (or the hold timeout) stands')
      if (closed + waiting > 0) log.debug({ closed, waiting }, 'credit usage recorded')
    },
  })
}
