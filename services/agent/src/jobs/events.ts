// Job events: every stored event is broadcast on NATS; GET /agent/job/:id/events replays the
// stored ones after Last-Event-ID, then forwards the live ones, and ends with the job. The
// answer's text deltas travel on the same subject but are never stored: live only, no id. A
// broadcast missed is found by one read of the store for all of the process's streams at once.
import { identityHeaders, type AgentChannels, type JobBroadcast, type JobDelta, type JobEvent } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import type { ServerResponse } from 'node:http'
import type { FastifyReply } from 'fastify'
import type { NatsConnection } from 'nats'
import { TooManyStreams } from '../errors.ts'
import { isFinished, type JobStore } from './store.ts'

/** What one read of the store found of a followed job: the events after the seq asked for, and whether it has finished. */
type FollowedEvents = { finished: boolean; events: JobEvent[] }

const isTerminal = (e: JobEvent) => e.type === 'status' && isFinished((e.data as { status: string }).status)

/**
 * One SSE frame: a stored event's sequence number is its id; a delta has none, so the client's
 * Last-Event-ID stays the last stored event and a resumed stream replays only stored events.
 */
export const sseFrame = (e: JobBroadcast) =>
  `${e.type === 'delta' ? '' : `id: ${e.seq}\n`}event: ${e.type}\ndata: ${JSON.stringify({ ...e.data, at: e.at })}\n\n`

export interface JobEventsOptions {
  nc: NatsConnection
  channels: AgentChannels
  store: Pick<JobStore, 'eventsOfJobs'>
  log: Logger
  /** how often the shared catch-up (catchUpAll) re-reads the store */
  pollMs?: number
  keepAliveMs?: number
  /** open streams one payer or key may hold in this process (AGENT_MAX_STREAMS_PER_OWNER) */
  maxStreamsPerOwner?: number
}

/**
 * Takes the reply over for server-sent events: status 200, the headers that keep proxies from
 * buffering, and a comment line every `keepAliveMs` while the stream is open, so proxies between
 * here and the client do not close a quiet stream.
 */
function openEventStream(reply: FastifyReply, keepAliveMs: number) {
  reply.hijack()
  const raw = reply.raw
  raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
    [identityHeaders.requestId]: reply.request.id,
  })
  raw.write('retry: 1000\n\n')
  const keepAlive = setInterval(() => raw.write(': keep-alive\n\n'), keepAliveMs)
  const stop = () => clearInterval(keepAlive)
  raw.once('finish', stop)
  raw.once('close', stop)
  return raw
}

export function createJobEvents({
  nc,
  channels,
  store,
  log,
  pollMs = 2_000,
  keepAliveMs = 15_000,
  maxStreamsPerOwner = 5,
}: JobEventsOptions) {
  const open = new Set<() => void>()
  /** what each follower has delivered and how it takes what the store has after that */
  const followers = new Set<{ jobId: string; last(): number; caughtUp(found: FollowedEvents | undefined): void }>()
  /** open streams per owner (payer address or key id), in this process */
  const streamsOf = new Map<string, number>()

  /**
   * Takes one of `ownerId`'s stream slots for as long as `raw` stays open, or refuses with 429
   * naming the limit when all are taken. Called before anything is started for the request.
   */
  function takeStreamSlot(ownerId: string, raw: ServerResponse) {
    const held = streamsOf.get(ownerId) ?? 0
    if (held >= maxStreamsPerOwner) throw new TooManyStreams(maxStreamsPerOwner)
    streamsOf.set(ownerId, held + 1)
    raw.once('close', () => {
      const now = (streamsOf.get(ownerId) ?? 1) - 1
      if (now > 0) streamsOf.set(ownerId, now)
      else streamsOf.delete(ownerId)
    })
  }

  let timer: NodeJS.Timeout | undefined
  let reading: Promise<void> | undefined
  let readAgain = false
  /**
   * The safety net of every stream in this process: one read of the store for all the jobs
   * followed, each after the last event delivered (the lowest of its followers'), handed to each
   * follower in order behind its live events. Runs every `pollMs` while anything is followed, and
   * at once after NATS reconnects (broadcasts sent meanwhile are lost).
   */
  function catchUpAll(): Promise<void> {
    if (reading) {
      readAgain = true
      return reading
    }
    clearTimeout(timer)
    timer = undefined
    reading = readAll().finally(() => {
      reading = undefined
      if (!readAgain) return scheduleCatchUp()
      readAgain = false
      void catchUpAll()
    })
    return reading
  }
  async function readAll() {
    const now = [...followers]
    if (now.length === 0) return
    const after = new Map<string, number>()
    for (const f of now) after.set(f.jobId, Math.min(f.last(), after.get(f.jobId) ?? Number.POSITIVE_INFINITY))
    try {
      const found = await store.eventsOfJobs(after)
      for (const f of now) f.caughtUp(found.get(f.jobId))
    } catch (error) {
      log.warn({ err: error, jobs: after.size }, 'job events could not be read')
    }
  }
  function scheduleCatchUp() {
    if (timer !== undefined || reading !== undefined || followers.size === 0) return
    timer = setTimeout(catchUpAll, pollMs)
    timer.unref()
  }
  void (async () => {
    for await (const status of nc.status()) if (status.type === 'reconnect') void catchUpAll()
  })()

  /** Broadcasts `e`; a failure is logged, with `fields`: what is lost reaches followers otherwise. */
  function broadcast(e: JobBroadcast, fields: Record<string, unknown>, failed: string) {
    try {
      const topic = channels.events(e.jobId)
      nc.publish(topic.subject, topic.message.encode(e))
    } catch (error) {
      log.warn({ err: error, jobId: e.jobId, ...fields }, failed)
    }
  }
  // a stored event: the shared catch-up picks it up
  const emit = (event: JobEvent) => broadcast(event, { seq: event.seq }, 'job event not broadcast')
  /** Broadcasts a piece of a running job's text; one that is lost reaches followers with the complete event. */
  const emitDelta = (jobId: string, text: string, offset: number) =>
    broadcast({ jobId, type: 'delta', at: Date.now(), data: { text, offset } }, { offset }, 'job text delta not broadcast')

  /**
   * Follows a job's events after `afterSeq`, in order and each once: the stored ones, then the live
   * ones (and what the shared catch-up finds). It ends after the job's last event (at once for a
   * job already `finished`, once what was missed is delivered), or on `stop()`; `ended` says true
   * when the job ended. A job found finished ends it whatever `afterSeq` says (a Last-Event-ID
   * beyond its last event gets nothing, and the end). Text deltas are forwarded live while each
   * starts where the text delivered so far ends; after a gap none is: the complete event has it all.
   */
  function watch(jobId: string, afterSeq: number, finished: boolean, onEvent: (event: JobBroadcast) => void) {
    let last = afterSeq
    /** characters of the answer's text delivered, and whether a delta was missed */
    let textAt = 0
    let textGap = false
    let done = false
    let resolveEnded!: (jobEnded: boolean) => void
    const ended = new Promise<boolean>((resolve) => {
      resolveEnded = resolve
    })
    const topic = channels.events(jobId)
    const sub = nc.subscribe(topic.subject)

    const follower = { jobId, last: () => last, caughtUp: (found: FollowedEvents | undefined) => (chain = chain.then(() => take(found))) }
    /** ends the follow; `jobEnded`: because the job ended (what `ended` answers) */
    const end = (jobEnded: boolean) => {
      if (done) return
      done = true
      sub.unsubscribe()
      followers.delete(follower)
      if (followers.size === 0) {
        clearTimeout(timer)
        timer = undefined
      }
      open.delete(stop)
      resolveEnded(jobEnded)
    }
    const stop = () => end(false)
    open.add(stop)

    const send = (e: JobEvent) => {
      if (done || e.seq !== last + 1) return
      last = e.seq
      onEvent(e)
      if (isTerminal(e)) end(true)
    }
    const sendDelta = (d: JobDelta) => {
      if (done || textGap) return
      if (d.data.offset !== textAt) {
        textGap = true
        return
      }
      textAt += d.data.text.length
      onEvent(d)
    }
    /** what a read of the store found: the events not yet delivered, and the end when the job finished */
    const take = (found: FollowedEvents | undefined) => {
      if (done || !found) return
      for (const e of found.events) send(e)
      // finished when read: the same read has every event, the terminal one included
      if (found.finished && !done) end(true)
    }
    // reads and live events are handled one at a time, in order
    let chain = Promise.resolve()
    const catchUp = () => {
      chain = chain
        .then(async () => {
          if (!done) take((await store.eventsOfJobs(new Map([[jobId, last]]))).get(jobId))
        })
        .catch((error) => log.warn({ err: error, jobId }, 'job events could not be read'))
      return chain
    }

    followers.add(follower)
    scheduleCatchUp()
    void catchUp().then(() => {
      if (finished) end(true)
    })
    void (async () => {
      for await (const m of sub) {
        let e: JobBroadcast
        try {
          e = topic.message.decode(m.data)
        } catch {
          continue
        }
        // behind the stored events before it: a catch-up in progress delivers those first
        if (e.type === 'delta') chain = chain.then(() => sendDelta(e))
        else if (e.seq === last + 1) chain = chain.then(() => send(e))
        else if (e.seq > last + 1 || isTerminal(e)) void catchUp() // a gap, or the end of a job the client is past
      }
    })()
    return { stop, ended }
  }

  /**
   * Streams a job's events after `afterSeq` as server-sent events until the job ends or the
   * client leaves. A job already finished (`finished`) gets what was missed, then the end.
   */
  function stream(reply: FastifyReply, jobId: string, afterSeq: number, finished: boolean, ownerId: string) {
    takeStreamSlot(ownerId, reply.raw)
    const raw = openEventStream(reply, keepAliveMs)
    const following = watch(jobId, afterSeq, finished, (e) => raw.write(sseFrame(e)))
    raw.on('close', following.stop)
    void following.ended.then(() => raw.end())
  }

  return {
    emit,
    emitDelta,
    watch,
    stream,
    takeStreamSlot,
    /** takes a reply over for server-sent events, with this service's keep-alive */
    openStream: (reply: FastifyReply) => openEventStream(reply, keepAliveMs),
    /** ends every open stream (shutdown): clients reconnect with Last-Event-ID to another replica */
    closeAll: () => {
      for (const stop of [...open]) stop()
    },
  }
}
export type JobEvents = ReturnType<typeof createJobEvents>
