// "Every debit published before now is recorded": the wait behind admin.credit.snapshot and withdrawals.
import type { creditChannels } from '@ats/contracts'
import { Unavailable } from '@ats/service-kit'
import type { JetStreamManager } from 'nats'

type CreditChannels = ReturnType<typeof creditChannels>

const pollMs = 10

/**
 * Resolves once the debit consumer has acked every debit message the stream held when it was
 * called: the stream's last sequence on the debits subject, read first, is at or below the
 * consumer's ack floor (acked = recorded: the consumer acks after its commit). Replicas share the
 * consumer, so this holds whichever replica recorded them. Past `waitMs` it throws 503: a copy
 * rebuilt from a ledger that is behind could spend credit twice.
 */
export function debitsRecorded(jsm: JetStreamManager, channels: CreditChannels, waitMs: number) {
  const { stream, debited, debitConsumer } = channels
  return async function caughtUp(): Promise<void> {
    const last = await jsm.streams.getMessage(stream, { last_by_subj: debited.subject }).then(
      (m) => m.seq,
      (error: Error) => {
        if (/no message found/i.test(error.message)) return 0
        throw error
      },
    )
    if (last === 0) return
    const deadline = Date.now() + waitMs
    for (;;) {
      const info = await jsm.consumers.info(stream, debitConsumer)
      if (info.ack_floor.stream_seq >= last) return
      if (Date.now() >= deadline) {
        throw new Unavailable(
          `the credit ledger has not recorded every debit yet (at ${info.ack_floor.stream_seq} of ${last}); try again shortly`,
        )
      }
      await new Promise((resolve) => setTimeout(resolve, pollMs))
    }
  }
}
