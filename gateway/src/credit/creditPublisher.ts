// What the gateway tells the ledger about credit: the debits it took (batched, before the request
// is served) and, for routes it charges itself, how much of a request's hold is kept.
import type { CreditDebit, CreditUsage, creditChannels } from '@ats/contracts'
import { ensureStream, publishTraced, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'

type CreditChannels = ReturnType<typeof creditChannels>

interface Waiter {
  debit: CreditDebit
  settle: (error?: Error) => void
}

const maxBatch = 512
/** batches published at once: a debit waits for the ack of its own batch only */
const maxInFlight = 4

/** the message id of a batch: its first debit's wallet and id (a debit goes in one batch only), so a batch published again is stored once */
const debitsMessageId = (debits: readonly CreditDebit[]) => `debits:${debits[0]!.wallet}:${debits[0]!.id}`

export interface CreditPublisherOptions {
  /** how long one publish waits for JetStream's ack (5 s) */
  publishTimeoutMs?: number
  /** the least time between two debit messages' starts: what a debit may wait under load to share a message (10 ms) */
  spacingMs?: number
  /** how often unsent usage reports are tried again (1 s) */
  retryEveryMs?: number
}

/**
 * Debits go with group commit: one message holds every debit taken since the last one started,
 * at most one message every `spacingMs` (a debit when none went for that long goes at the end of
 * its event-loop turn, so a quiet gateway adds no wait), up to 4 in flight when acks are slow
 * (debits need no order: the ledger records each id once). One write, one ack and one ledger
 * record cover every debit of a message, instead of one each. A debit resolves once
 * JetStream stored it and rejects when it could not be: the caller gives it back and answers 503,
 * since the ledger must hear of every debit before its request is served (a rebuilt copy reads
 * the ledger). Usage reports come after the answer: one that cannot be published is kept and
 * tried again every second, so a short NATS outage does not leave holds unreported.
 */
export async function createCreditPublisher(
  nc: NatsConnection,
  channels: CreditChannels,
  log: Logger,
  { publishTimeoutMs = 5_000, spacingMs = 10, retryEveryMs = 1_000 }: CreditPublisherOptions = {},
) {
  await ensureStream(nc, channels.streamSpec)
  const js = nc.jetstream()
  const queued: Waiter[] = []
  let inFlight = 0

  async function publishBatch(waiters: Waiter[]) {
    const debits = waiters.map((w) => w.debit)
    let failure: Error | undefined
    try {
      await publishTraced(js, channels.debited.subject, channels.debited.message.encode({ debits }), {
        msgID: debitsMessageId(debits),
        timeout: publishTimeoutMs,
      })
    } catch (error) {
      failure = error as Error
      log.error({ err: error, debits: debits.length }, 'credit debits not published: given back, their requests answered 503')
    }
    for (const w of waiters) w.settle(failure)
  }

  let sentAt = Number.NEGATIVE_INFINITY
  let pending: NodeJS.Immediate | NodeJS.Timeout | undefined
  /** publishes what is queued once `spacingMs` after the last message (at the end of this turn, if that has passed) */
  function drainSoon() {
    if (pending || queued.length === 0) return
    const wait = sentAt + spacingMs - performance.now()
    pending = wait > 0 ? setTimeout(drain, wait) : setImmediate(drain)
  }
  function drain() {
    pending = undefined
    if (queued.length === 0 || inFlight >= maxInFlight) return // at full flight the next ack drains
    inFlight++
    sentAt = performance.now()
    void publishBatch(queued.splice(0, maxBatch)).finally(() => {
      inFlight--
      drainSoon()
    })
    drainSoon()
  }

  const unsentUsage: CreditUsage[] = []
  const sendUsage = (usage: CreditUsage) =>
    publishTraced(js, channels.usage.subject, channels.usage.message.encode(usage), { msgID: usage.hold, timeout: publishTimeoutMs })
  let retrying = false
  const retryUsage = async () => {
    if (retrying) return
    retrying = true
    try {
      while (unsentUsage.length > 0) {
        await sendUsage(unsentUsage[0]!)
        unsentUsage.shift()
      }
    } catch {
      // tried again at the next tick
    } finally {
      retrying = false
    }
  }
  const timer = setInterval(() => {
    if (unsentUsage.length > 0) void retryUsage()
  }, retryEveryMs)
  timer.unref()

  return {
    /** resolves once JetStream stored the debit; rejects when it could not be published */
    debit(debit: CreditDebit): Promise<void> {
      return new Promise((resolve, reject) => {
        queued.push({ debit, settle: (error) => (error ? reject(error) : resolve()) })
        drainSoon()
      })
    },
    /** reports what a hold kept; never throws (kept and retried when it cannot be published) */
    async usage(usage: CreditUsage): Promise<void> {
      try {
        await sendUsage(usage)
      } catch (error) {
        unsentUsage.push(usage)
        log.error({ err: error, hold: usage.hold, unsent: unsentUsage.length }, 'credit usage not published yet; retrying every second')
      }
    },
    async close() {
      clearInterval(timer)
      // debits waiting for their spacing go now
      if (pending) drain()
      await retryUsage()
      if (unsentUsage.length > 0) {
        const holds = unsentUsage.map(({ hold, wallet, amount }) => ({ hold, wallet, amount }))
        log.error({ unsent: holds.length, holds }, 'credit usage could not be published before shutdown: the ledger releases those holds')
      }
    },
  }
}

export type CreditPublisher = Awaited<ReturnType<typeof createCreditPublisher>>
