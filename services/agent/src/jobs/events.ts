// Job events: every stored event is broadcast on NATS; GET /agent/job/:id/events replays the
// stored ones after Last-Event-ID, then forwards the live ones, and ends with the job.
import type { AgentChannels, JobEvent } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import type { FastifyReply } from 'fastify'
import type { NatsConnection } from 'nats'
import type { JobStore } from './store.ts'

const terminal = new Set(['complete', 'failed', 'cancelled'])
const isTerminal = (e: JobEvent) => e.type === 'status' && terminal.has((e.data as { status: string }).status)

/** One SSE frame: the event's sequence number is its id. */
export const sseFrame = (e: JobEvent) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify({ ...e.data, at: e.at })}\n\n`

export interface JobEventsOptions {
  nc: NatsConnection
  channels: AgentChannels
  store: JobStore
  log: Logger
  /** how often a stream re-reads the store in case a broadcast was missed */
  pollMs?: number
  keepAliveMs?: number
}

export function createJobEvents({ nc, channels, store, log, pollMs = 2_000, keepAliveMs = 15_000 }: JobEventsOptions) {
  const open = new Set<() => void>()

  function emit(event: JobEvent) {
    try {
      const topic = channels.events(event.jobId)
      nc.publish(topic.subject, topic.message.encode(event))
    } catch (error) {
      // the stream's poll picks the stored event up
      log.warn({ err: error, jobId: event.jobId, seq: event.seq }, 'job event not broadcast')
    }
  }

  /**
   * Streams a job's events after `afterSeq` as server-sent events until the job ends or the
   * client leaves. A job already finished (`finished`) gets what was missed, then the end.
   */
  function stream(reply: FastifyReply, jobId: string, afterSeq: number, finished: boolean) {
    reply.hijack()
    const raw = reply.raw
    raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    })
    raw.write('retry: 1000\n\n')
    let last = afterSeq
    let done = false
    const topic = channels.events(jobId)
    const sub = nc.subscribe(topic.subject)

    const finish = () => {
      if (done) return
      done = true
      sub.unsubscribe()
      clearInterval(poll)
      clearInterval(keepAlive)
      open.delete(finish)
      raw.end()
    }
    open.add(finish)
    raw.on('close', finish)

    const send = (e: JobEvent) => {
      if (done || e.seq !== last + 1) return
      raw.write(sseFrame(e))
      last = e.seq
      if (isTerminal(e)) finish()
    }
    // one catch-up at a time, in order
    let chain = Promise.resolve()
    const catchUp = () => {
      chain = chain
        .then(async () => {
          if (done) return
          for (const e of await store.eventsAfter(jobId, last)) send(e)
        })
        .catch((error) => log.warn({ err: error, jobId }, 'job events could not be read'))
      return chain
    }

    const poll = setInterval(catchUp, pollMs)
    const keepAlive = setInterval(() => raw.write(': keep-alive\n\n'), keepAliveMs)
    void catchUp().then(() => {
      if (finished) finish()
    })
    void (async () => {
      for await (const m of sub) {
        let e: JobEvent
        try {
          e = topic.message.decode(m.data)
        } catch {
          continue
        }
        if (e.seq === last + 1) chain = chain.then(() => send(e))
        else if (e.seq > last + 1) void catchUp()
      }
    })()
  }

  return {
    emit,
    stream,
    /** ends every open stream (shutdown): clients reconnect with Last-Event-ID to another replica */
    closeAll: () => {
      for (const finish of [...open]) finish()
    },
  }
}
export type JobEvents = ReturnType<typeof createJobEvents>
