import type { Logger } from './logger.ts'
import { startWorkerLoop } from './workers.ts'

/**
 * The transactional-outbox pattern on a table the service already has: a row is written in the
 * transaction of the state change it announces, marked unpublished; after the commit `send(id)`
 * publishes it (JetStream, with the row id as message id so a repeat is stored once) and marks
 * it published. A process that dies in between leaves the row unpublished, and every replica's
 * sweep publishes such rows once they are older than a sweep interval. So nothing is lost and
 * a publish may happen twice, never zero times: receivers de-duplicate by id.
 */
export interface OutboxOptions {
  /** names the loop and the log lines: "job-queue" */
  name: string
  log: Logger
  /** publishes the row `id` and marks it published; throws when it could not */
  publish(id: string): Promise<void>
  /** ids of rows written before `olderThan` and not yet published, at most `limit` */
  unpublished(olderThan: Date, limit: number): Promise<string[]>
  /** how often the sweep looks, and how old a row must be before it takes it (5 s) */
  sweepEveryMs?: number
  /** rows per sweep round (100) */
  batch?: number
}

export interface Outbox {
  /** publishes one row now; resolves false (logged) when it is left to the sweep, never throws */
  send(id: string): Promise<boolean>
  stop(): Promise<void>
}

export function startOutbox({ name, log, publish, unpublished, sweepEveryMs = 5_000, batch = 100 }: OutboxOptions): Outbox {
  async function send(id: string): Promise<boolean> {
    try {
      await publish(id)
      return true
    } catch (error) {
      log.warn({ err: error, id, outbox: name }, `${name}: ${id} not published yet; the sweep retries`)
      return false
    }
  }
  const sweeper = startWorkerLoop({
    name: `${name}-sweep`,
    log,
    idleMs: sweepEveryMs,
    round: async () => {
      const left = await unpublished(new Date(Date.now() - sweepEveryMs), batch)
      let published = 0
      for (const id of left) if (await send(id)) published += 1
      // more at once only while every row of a full round went out
      return left.length === batch && published === left.length
    },
  })
  return { send, stop: sweeper.stop }
}
