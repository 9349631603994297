import type { Topic } from '@ats/contracts'
import { AckPolicy, DeliverPolicy, headers as natsHeaders, nanos, type JsMsg, type NatsConnection } from 'nats'
import { ensureStream, type StreamSpec } from './jetstream.ts'
import type { Logger } from './logger.ts'

/** Background work: one loop helper, and the durable JetStream consumer built on it. */

export interface WorkerLoop {
  /** runs the next round now instead of after the pause */
  wake(): void
  /** lets the round in progress finish, then stops */
  stop(): Promise<void>
}

export interface WorkerLoopOptions {
  name: string
  log: Logger
  /** pause between rounds that found nothing more to do */
  idleMs: number
  /** pause after a round that failed */
  errorDelayMs?: number
  /** one round of work; resolves true when there is more to do at once */
  round(): Promise<boolean>
}

/** Runs `round` until stopped: again at once while it says there is more, after `idleMs` otherwise; a failure is logged and retried. */
export function startWorkerLoop({ name, log, idleMs, errorDelayMs = idleMs, round }: WorkerLoopOptions): WorkerLoop {
  let running = true
  let wake: (() => void) | undefined
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms)
      wake = () => {
        clearTimeout(timer)
        resolve()
      }
    })
  const done = (async () => {
    while (running) {
      let more = false
      let failed = false
      try {
        more = await round()
      } catch (error) {
        if (!running) break
        failed = true
        log.error({ err: error, worker: name }, `${name}: round failed; retrying`)
      }
      if (running && !more) await pause(failed ? errorDelayMs : idleMs)
    }
  })()
  return {
    wake: () => wake?.(),
    async stop() {
      running = false
      wake?.()
      await done
    },
  }
}

/** The stream, and the durable pull consumer with explicit acks that both consumer helpers read from. */
async function openDurable(nc: NatsConnection, stream: StreamSpec, durable: string, subject: string, ackWaitMs: number, maxDeliver?: number) {
  const jsm = await ensureStream(nc, stream)
  await jsm.consumers.add(stream.name, {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: subject,
    ack_wait: nanos(ackWaitMs),
    ...(maxDeliver === undefined ? {} : { max_deliver: maxDeliver }),
    max_ack_pending: 10_000,
  })
  return nc.jetstream().consumers.get(stream.name, durable)
}

/** A message of a durable consumer, decoded, with how often it was delivered. */
export interface Delivery<M> {
  message: M
  deliveries: number
}

export interface DurableConsumerOptions<M> {
  nc: NatsConnection
  log: Logger
  stream: StreamSpec
  /** the durable consumer's name; replicas share it */
  durable: string
  topic: Topic<M>
  /** handles a batch; throwing makes each message of it be tried alone */
  handle(batch: Array<Delivery<M>>): Promise<void>
  /**
   * a message that fails alone this many times, or cannot be decoded, is published here with its
   * reason (header `ats-dead-letter-reason`) and taken off the consumer, so it cannot block the rest
   */
  deadLetterSubject: string
  maxDeliveries?: number
  batchSize?: number
  ackWaitMs?: number
  retryDelayMs?: number
}

/**
 * A durable pull consumer with explicit acks: a message is acked only once handled, so a
 * process that is down or restarting loses nothing and catches up where it stopped. A batch
 * that fails is retried message by message; one that keeps failing goes to the dead letters.
 */
export async function startDurableConsumer<M>(options: DurableConsumerOptions<M>): Promise<WorkerLoop> {
  const { nc, log, stream, durable, topic, handle, deadLetterSubject } = options
  const { maxDeliveries = 5, batchSize = 64, ackWaitMs = 30_000, retryDelayMs = 2_000 } = options
  const consumer = await openDurable(nc, stream, durable, topic.subject, ackWaitMs)
  const js = nc.jetstream()

  async function deadLetter(m: JsMsg, reason: string) {
    const h = natsHeaders()
    h.set('ats-dead-letter-reason', reason.slice(0, 1000))
    h.set('ats-dead-letter-subject', m.subject)
    h.set('ats-dead-letter-seq', String(m.seq))
    await js.publish(deadLetterSubject, m.data, { headers: h, msgID: `dead-letter:${stream.name}:${m.seq}` })
    m.term()
    log.error({ seq: m.seq, subject: m.subject, deliveries: m.info.deliveryCount, reason }, 'message moved to the dead letters')
  }

  async function handleAlone(m: JsMsg, message: M) {
    try {
      await handle([{ message, deliveries: m.info.deliveryCount }])
      m.ack()
    } catch (error) {
      const reason = (error as Error).message.split('\n')[0]!
      if (m.info.deliveryCount >= maxDeliveries) return deadLetter(m, `failed ${m.info.deliveryCount} times: ${reason}`)
      log.warn({ seq: m.seq, deliveries: m.info.deliveryCount, reason }, 'message failed; it will be redelivered')
      m.nak(retryDelayMs)
    }
  }

  async function take(messages: JsMsg[]) {
    const good: Array<{ m: JsMsg; message: M }> = []
    for (const m of messages) {
      try {
        good.push({ m, message: topic.message.decode(m.data) })
      } catch (error) {
        await deadLetter(m, (error as Error).message)
      }
    }
    if (good.length === 0) return
    try {
      await handle(good.map(({ m, message }) => ({ message, deliveries: m.info.deliveryCount })))
      for (const { m } of good) m.ack()
    } catch (error) {
      if (good.length === 1) return handleAlone(good[0]!.m, good[0]!.message)
      log.warn({ err: error, count: good.length }, 'batch failed; handling its messages one by one')
      for (const { m, message } of good) await handleAlone(m, message)
    }
  }

  return startWorkerLoop({
    name: durable,
    log,
    idleMs: 0,
    errorDelayMs: retryDelayMs,
    round: async () => {
      if (nc.isClosed()) throw new Error('the NATS connection is closed')
      const batch = await consumer.fetch({ max_messages: batchSize, expires: 1_000 })
      const messages: JsMsg[] = []
      try {
        for await (const m of batch) messages.push(m)
      } finally {
        // a fetch that fails part-way still hands over what it received: left unacked, those
        // messages would wait out the ack wait (30 s) before anyone saw them again
        if (messages.length > 0) await take(messages)
      }
      return true
    },
  })
}

/** What a work-queue handler decided: done (acked), or try again later (the delivery does not count against the job). */
export type WorkOutcome = 'done' | { retryInMs: number }

/** One delivery of a work-queue message, as its handler sees it. */
export interface WorkItem<M> {
  message: M
  /** 1 on the first delivery */
  deliveries: number
  /** aborted when the process stops: end soon, the message will be redelivered to another worker */
  shutdown: AbortSignal
}

export interface WorkQueueOptions<M> {
  nc: NatsConnection
  log: Logger
  stream: StreamSpec
  /** the durable consumer's name; every worker process shares it */
  durable: string
  topic: Topic<M>
  /** messages handled at once by this process */
  concurrency: number
  /** a message not acked within this is redelivered; while its handler runs, progress is signalled every third of it */
  ackWaitMs: number
  /** deliveries a message gets; the next one goes to `exhausted` instead of `handle` */
  maxDeliveries: number
  handle(item: WorkItem<M>): Promise<WorkOutcome>
  /** a message delivered more than maxDeliveries times (its handlers died or failed each time): record why, it is then acked */
  exhausted(message: M, deliveries: number): Promise<void>
  retryDelayMs?: number
}

/**
 * A JetStream work queue: a durable pull consumer with explicit acks whose messages are long
 * tasks (agent jobs). Each process runs up to `concurrency` at once and tells JetStream they are
 * in progress while they run, so the ack wait can stay short: a worker killed mid-task has its
 * messages redelivered to another within `ackWaitMs`. A handler that throws is retried after
 * `retryDelayMs`; deliveries are bounded by `maxDeliveries`, then `exhausted` decides.
 */
export async function startWorkQueueConsumer<M>(options: WorkQueueOptions<M>): Promise<WorkerLoop> {
  const { nc, log, stream, durable, topic, concurrency, ackWaitMs, maxDeliveries, handle, exhausted } = options
  const { retryDelayMs = 1_000 } = options
  // one more delivery than the handler gets: that one runs `exhausted`
  const consumer = await openDurable(nc, stream, durable, topic.subject, ackWaitMs, maxDeliveries + 1)
  const shutdown = new AbortController()
  const inFlight = new Set<Promise<void>>()
  let slotFreed: (() => void) | undefined

  async function run(m: JsMsg) {
    let message: M
    try {
      message = topic.message.decode(m.data)
    } catch (error) {
      log.error({ seq: m.seq, err: error }, 'unreadable work-queue message dropped')
      m.term()
      return
    }
    const deliveries = m.info.deliveryCount
    const heartbeat = setInterval(() => m.working(), Math.max(100, Math.floor(ackWaitMs / 3)))
    try {
      if (deliveries > maxDeliveries) {
        await exhausted(message, deliveries)
        m.ack()
        return
      }
      const outcome = await handle({ message, deliveries, shutdown: shutdown.signal })
      if (outcome === 'done') m.ack()
      else m.nak(outcome.retryInMs)
    } catch (error) {
      log.error({ err: error, seq: m.seq, deliveries }, 'work-queue handler failed; the message will be redelivered')
      m.nak(shutdown.signal.aborted ? 0 : retryDelayMs)
    } finally {
      clearInterval(heartbeat)
    }
  }

  const loop = startWorkerLoop({
    name: durable,
    log,
    idleMs: 0,
    errorDelayMs: retryDelayMs,
    round: async () => {
      if (nc.isClosed()) throw new Error('the NATS connection is closed')
      if (inFlight.size >= concurrency) {
        await new Promise<void>((resolve) => {
          slotFreed = resolve
        })
        return true
      }
      const batch = await consumer.fetch({ max_messages: concurrency - inFlight.size, expires: 1_000 })
      for await (const m of batch) {
        const task: Promise<void> = run(m).finally(() => {
          inFlight.delete(task)
          slotFreed?.()
        })
        inFlight.add(task)
      }
      return true
    },
  })
  return {
    wake: loop.wake,
    async stop() {
      shutdown.abort()
      slotFreed?.()
      await loop.stop()
      await Promise.allSettled([...inFlight])
    },
  }
}
