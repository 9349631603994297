import type { Topic } from '@ats/contracts'
import { firstLine, isDatabaseUnavailable } from './errors.ts'
import { AckPolicy, DeliverPolicy, headers as natsHeaders, nanos, type Consumer, type JsMsg, type NatsConnection } from 'nats'
import { ensureStream, jetStreamReplicas, type StreamSpec } from './jetstream.ts'
import type { Logger } from './logger.ts'
import { SpanKind, SpanStatusCode, batchSpanSpec, contextOfHeaders, startSpan, traceContext, tracingEnabled } from './tracing.ts'

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
async function openDurable(
  nc: NatsConnection,
  stream: StreamSpec,
  durable: string,
  subject: string,
  ackWaitMs: number,
  maxDeliver?: number,
) {
  const jsm = await ensureStream(nc, stream)
  // in a cluster, a stream just made can be "not found" for a moment by the server the consumer
  // request lands on (its group still forming): asked again, for up to about 6 s
  for (let wait = 50; ; wait *= 2) {
    try {
      await jsm.consumers.add(stream.name, {
        durable_name: durable,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: subject,
        ack_wait: nanos(ackWaitMs),
        ...(maxDeliver === undefined ? {} : { max_deliver: maxDeliver }),
        max_ack_pending: 10_000,
        // set, not inherited: a durable made while its stream had fewer copies does not always grow
        // with the stream (nats-server 2.9 left some at one), and this brings it to the count
        num_replicas: jetStreamReplicas(nc),
      })
      return await nc.jetstream().consumers.get(stream.name, durable)
    } catch (error) {
      const streamNotFound = (error as { api_error?: { err_code?: number } }).api_error?.err_code === 10059
      if (!streamNotFound || wait > 3_200) throw error
      await new Promise((resolve) => setTimeout(resolve, wait))
    }
  }
}

/**
 * Runs `fn` in a consumer span over `messages` when tracing is on; just runs it otherwise. A string
 * it resolves to is the outcome. One message: the span is a child of its publisher's (its
 * `traceparent`), so the trace goes on through the consumer. A batch: a span of its own, linked
 * to each message's trace (a batch serves many requests; it cannot be the child of them all).
 */
async function consuming<T>(messages: JsMsg[], durable: string, fn: () => Promise<T>): Promise<T> {
  if (!tracingEnabled() || messages.length === 0) return fn()
  const subject = messages[0]!.subject
  const { span, ctx } = startSpan(`process ${subject}`, {
    kind: SpanKind.CONSUMER,
    ...batchSpanSpec(
      messages.map((m) => contextOfHeaders(m.headers)),
      traceContext.active(),
    ),
    attributes: {
      'messaging.system': 'nats',
      'messaging.destination.name': subject,
      'messaging.operation.type': 'process',
      'messaging.consumer.group.name': durable,
      'messaging.batch.message_count': messages.length,
      ...(messages.length === 1 ? { 'ats.deliveries': messages[0]!.info.deliveryCount } : {}),
    },
  })
  try {
    const result = await traceContext.with(ctx, fn)
    if (typeof result === 'string') {
      span.setAttribute('ats.outcome', result)
      if (result === 'failed' || result === 'unreadable') span.setStatus({ code: SpanStatusCode.ERROR })
    }
    return result
  } finally {
    span.end()
  }
}

/** The trace headers of a message handed back, so its next run continues the same trace; undefined with tracing off. */
function traceHeadersOf(m: JsMsg) {
  const traceparent = tracingEnabled() ? m.headers?.get('traceparent') : undefined
  if (!traceparent) return undefined
  const h = natsHeaders()
  h.set('traceparent', traceparent)
  const tracestate = m.headers?.get('tracestate')
  if (tracestate) h.set('tracestate', tracestate)
  return h
}

/** How long one pull request waits at the server before the client asks again (nats.js' default). */
const PULL_EXPIRES_MS = 30_000

interface Reader {
  /** the next message, waiting for one until `until` settles (then undefined); throws if the subscription failed */
  next(until: Promise<unknown>): Promise<JsMsg | undefined>
  /** up to `max` messages that have arrived already, or that arrive within `lingerMs` (0: without waiting) */
  ready(max: number, lingerMs?: number): Promise<JsMsg[]>
  /** ends the subscription; resolves with the messages it had received that were not read yet */
  close(): Promise<JsMsg[]>
}

/**
 * A durable consumer's messages through one subscription that lives as long as the reader
 * (nats.js `consume`), so every message JetStream delivers reaches it. Not `fetch` in a loop:
 * each fetch subscribes anew and unsubscribes at a deadline of its own (a client-side timer at
 * 1.05 × its expiry). When the event loop is late (a busy process), that timer can run before
 * the socket is read, and a message the server delivered in the last moments of the pull is
 * dropped by the client unseen while the server counts it delivered: it comes back only after
 * the ack wait (with fetch, the ledger's dead-letter test waited 30 s about one run in ten: its
 * 2 s nak delay is a multiple of the 1 s fetch, so redeliveries fell on fetch ends). Pulls are
 * sent from inside the iterator, that is only as the reader reads: at most `maxMessages` wait in
 * the process ahead of it.
 */
async function openReader(consumer: Consumer, maxMessages: number): Promise<Reader> {
  const messages = await consumer.consume({ max_messages: maxMessages, expires: PULL_EXPIRES_MS })
  const iterator = messages[Symbol.asyncIterator]()
  // a read that `until` overtook stays pending here, for the next call: no message is skipped
  let pending: Promise<IteratorResult<JsMsg>> | undefined
  let failure: unknown
  const read = async (until: Promise<unknown>): Promise<JsMsg | undefined> => {
    if (failure !== undefined) throw failure
    pending ??= iterator.next()
    const result = await Promise.race([pending, until.then(() => undefined)])
    if (result === undefined) return undefined
    pending = undefined
    if (result.done) {
      failure = new Error('the consumer subscription ended')
      throw failure
    }
    return result.value
  }
  return {
    next: read,
    async ready(max, lingerMs = 0) {
      const arrived: JsMsg[] = []
      const deadline = lingerMs > 0 ? new Promise((resolve) => setTimeout(resolve, lingerMs)) : undefined
      try {
        while (arrived.length < max) {
          const m = await read(deadline ?? new Promise((resolve) => setImmediate(resolve)))
          if (!m) break
          arrived.push(m)
        }
      } catch {
        // `failure` is kept: the next `next` throws it, after these are handled
      }
      return arrived
    },
    async close() {
      // closing queues the end behind what was received; reading on hands those over (a pull
      // still queued goes out to an inbox nobody listens on, and the server drops such pulls)
      const closed = messages.close()
      const left: JsMsg[] = []
      try {
        for (let r = await (pending ?? iterator.next()); !r.done; r = await iterator.next()) left.push(r.value)
      } catch {
        // the subscription had failed: nothing more to hand over
      }
      pending = undefined
      await closed.catch(() => {})
      return left
    },
  }
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
  /**
   * how long a batch waits for more messages after its first, when fewer than `batchSize` have
   * arrived (default 0: a batch is what has arrived). A handler whose cost is mostly per batch (one
   * INSERT for many rows) does less work per message with fuller batches.
   */
  lingerMs?: number
  ackWaitMs?: number
  retryDelayMs?: number
}

/**
 * A durable pull consumer with explicit acks: a message is acked only once handled, so a
 * process that is down or restarting loses nothing and catches up where it stopped. A batch
 * (what has arrived, up to `batchSize`) that fails is retried message by message; one that
 * keeps failing goes to the dead letters. Stopping handles what has arrived, then unsubscribes.
 */
export async function startDurableConsumer<M>(options: DurableConsumerOptions<M>): Promise<WorkerLoop> {
  const { nc, log, stream, durable, topic, handle, deadLetterSubject } = options
  const { maxDeliveries = 5, batchSize = 64, lingerMs = 0, ackWaitMs = 30_000, retryDelayMs = 2_000 } = options
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

  /**
   * A message that failed: redelivered after `retryDelayMs`, or dead-lettered after
   * `maxDeliveries`, unless the database was out of reach (restarting, failing over): that is no
   * fault of the message, which is then redelivered for as long as it takes (a charge dropped to
   * the dead letters during a Postgres restart would be a paid answer never recorded).
   */
  async function failed(m: JsMsg, error: unknown) {
    const reason = firstLine(error)
    if (isDatabaseUnavailable(error)) {
      log.warn({ seq: m.seq, deliveries: m.info.deliveryCount, reason }, 'the database is unavailable; the message will be redelivered')
      return m.nak(retryDelayMs)
    }
    if (m.info.deliveryCount >= maxDeliveries) return deadLetter(m, `failed ${m.info.deliveryCount} times: ${reason}`)
    log.warn({ seq: m.seq, deliveries: m.info.deliveryCount, reason }, 'message failed; it will be redelivered')
    m.nak(retryDelayMs)
  }

  async function handleAlone(m: JsMsg, message: M) {
    try {
      await handle([{ message, deliveries: m.info.deliveryCount }])
      m.ack()
    } catch (error) {
      await failed(m, error)
    }
  }

  const take = (messages: JsMsg[]) => consuming(messages, durable, () => takeBatch(messages))

  async function takeBatch(messages: JsMsg[]) {
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
      // a batch of one has been tried alone already
      if (good.length === 1) return failed(good[0]!.m, error)
      log.warn({ err: error, count: good.length }, 'batch failed; handling its messages one by one')
      for (const { m, message } of good) await handleAlone(m, message)
    }
  }

  let reader: Reader | undefined
  let stopping!: () => void
  const stopped = new Promise<void>((resolve) => (stopping = resolve))
  const loop = startWorkerLoop({
    name: durable,
    log,
    idleMs: 0,
    errorDelayMs: retryDelayMs,
    round: async () => {
      if (nc.isClosed()) throw new Error('the NATS connection is closed')
      reader ??= await openReader(consumer, batchSize)
      let batch: JsMsg[]
      try {
        const first = await reader.next(stopped)
        if (!first) return false
        batch = [first, ...(await reader.ready(batchSize - 1, lingerMs))]
      } catch (error) {
        // the subscription failed: a new one on the next round
        const failed = reader
        reader = undefined
        await take(await failed.close())
        throw error
      }
      await take(batch)
      return true
    },
  })
  return {
    wake: loop.wake,
    async stop() {
      stopping()
      await loop.stop()
      if (!reader) return
      const left = await reader.close()
      reader = undefined
      for (let i = 0; i < left.length; i += batchSize) await take(left.slice(i, i + batchSize))
    },
  }
}

/**
 * What a work-queue handler decided: `'done'` (acked); `'handBack'`: not done, through no fault
 * of the task (the process is stopping): the message goes back to the queue as a new one, so
 * this delivery does not count toward `maxDeliveries`; `{ retryInMs }`: try again after that
 * delay (a nak: the delivery counts).
 */
export type WorkOutcome = 'done' | 'handBack' | { retryInMs: number }

/** One delivery of a work-queue message, as its handler sees it. */
export interface WorkItem<M> {
  message: M
  /** 1 on the first delivery */
  deliveries: number
  /** aborted when the process stops: end soon, and answer `'handBack'` */
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
 * `retryDelayMs`; deliveries are bounded by `maxDeliveries`, then `exhausted` decides. A message
 * is pulled only when a slot is free (one at a time), so none waits in a busy process while
 * another is idle. A stopping process hands its messages back (`'handBack'`): republished as
 * new messages, then acked, so a rolling restart does not use up a task's deliveries.
 */
export async function startWorkQueueConsumer<M>(options: WorkQueueOptions<M>): Promise<WorkerLoop> {
  const { nc, log, stream, durable, topic, concurrency, ackWaitMs, maxDeliveries, handle, exhausted } = options
  const { retryDelayMs = 1_000 } = options
  // one more delivery than the handler gets: that one runs `exhausted`
  const consumer = await openDurable(nc, stream, durable, topic.subject, ackWaitMs, maxDeliveries + 1)
  const js = nc.jetstream()
  const shutdown = new AbortController()
  const stopped = new Promise<void>((resolve) => shutdown.signal.addEventListener('abort', () => resolve(), { once: true }))
  const inFlight = new Set<Promise<unknown>>()
  let slotFreed: (() => void) | undefined

  /**
   * The message again as a new one (its delivery count starts over), then the old one acked.
   * The message id (the old message's stream sequence) makes a repeat of this a duplicate that
   * JetStream drops; should the ack be lost, the old one comes back too, and the task sees a
   * second delivery of work it must already tolerate (redeliveries are at-least-once).
   */
  async function handBack(m: JsMsg) {
    try {
      const headers = traceHeadersOf(m)
      await js.publish(m.subject, m.data, { msgID: `handed-back:${stream.name}:${m.seq}`, ...(headers ? { headers } : {}) })
      m.ack()
    } catch (error) {
      log.warn({ err: error, seq: m.seq }, 'work-queue message not handed back; redelivered instead (the delivery counts)')
      m.nak()
    }
  }

  /** handles one message; resolves to what became of it */
  async function runOne(m: JsMsg): Promise<string> {
    let message: M
    try {
      message = topic.message.decode(m.data)
    } catch (error) {
      log.error({ seq: m.seq, err: error }, 'unreadable work-queue message dropped')
      m.term()
      return 'unreadable'
    }
    const deliveries = m.info.deliveryCount
    const heartbeat = setInterval(() => m.working(), Math.max(100, Math.floor(ackWaitMs / 3)))
    try {
      if (deliveries > maxDeliveries) {
        await exhausted(message, deliveries)
        m.ack()
        return 'exhausted'
      }
      const outcome = await handle({ message, deliveries, shutdown: shutdown.signal })
      if (outcome === 'done') m.ack()
      else if (outcome === 'handBack') await handBack(m)
      else m.nak(outcome.retryInMs)
      return typeof outcome === 'string' ? outcome : 'retry'
    } catch (error) {
      log.error({ err: error, seq: m.seq, deliveries }, 'work-queue handler failed; the message will be redelivered')
      // a run the stop cut short is not the task's failure
      if (shutdown.signal.aborted) await handBack(m)
      else m.nak(retryDelayMs)
      return 'failed'
    } finally {
      clearInterval(heartbeat)
    }
  }

  let reader: Reader | undefined
  const closeReader = async () => {
    const closing = reader
    reader = undefined
    // received but never started (none, unless a pull was answered twice): back to the queue
    for (const m of closing ? await closing.close() : []) await handBack(m)
  }
  const loop = startWorkerLoop({
    name: durable,
    log,
    idleMs: 0,
    errorDelayMs: retryDelayMs,
    round: async () => {
      if (nc.isClosed()) throw new Error('the NATS connection is closed')
      if (inFlight.size >= concurrency) {
        // nothing is pulled while no slot is free: the subscription ends, a new one starts when one frees
        await closeReader()
        await new Promise<void>((resolve) => {
          slotFreed = resolve
        })
        return true
      }
      reader ??= await openReader(consumer, 1)
      let m: JsMsg | undefined
      try {
        m = await reader.next(stopped)
      } catch (error) {
        await closeReader()
        throw error
      }
      if (!m) return false
      if (shutdown.signal.aborted) {
        // it arrived as the process began to stop: not started, so not an attempt
        await handBack(m)
        return false
      }
      // in a consumer span continuing the submitter's trace, when tracing is on
      const task: Promise<unknown> = consuming([m], durable, () => runOne(m)).finally(() => {
        inFlight.delete(task)
        slotFreed?.()
      })
      inFlight.add(task)
      return true
    },
  })
  return {
    wake: loop.wake,
    async stop() {
      shutdown.abort()
      slotFreed?.()
      await loop.stop()
      await closeReader()
      await Promise.allSettled([...inFlight])
    },
  }
}
