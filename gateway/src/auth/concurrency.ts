import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { TooManyInFlight } from '../errors.ts'

/**
 * Requests in flight per client address and per API key (or credit-paying wallet), in this gateway process (uncapped,
 * 140 slow requests of one key starved its service for every other caller). A request counts
 * from its arrival until its connection is done with it (answered, or the client gone).
 */
export interface ConcurrencyLimiter {
  /** counts the request for `who` (a client address or a key) or throws 429 when `who` has `limit` in flight */
  enter(request: FastifyRequest, reply: FastifyReply, who: string, limit: number, what: 'client address' | 'key' | 'wallet'): void
}

/** what a response counted against, left when it closes (one listener per response, not one per count) */
const entered = Symbol('entered')
type Counted = ServerResponse & { [entered]?: string[] }

export function createConcurrencyLimiter(): ConcurrencyLimiter {
  const counts = new Map<string, number>()
  const leave = (who: string) => {
    const left = (counts.get(who) ?? 1) - 1
    if (left <= 0) counts.delete(who)
    else counts.set(who, left)
  }
  return {
    enter(_request, reply, who, limit, what) {
      const now = counts.get(who) ?? 0
      if (now >= limit) {
        reply.header('retry-after', 1)
        throw new TooManyInFlight(what, limit)
      }
      counts.set(who, now + 1)
      const raw = reply.raw as Counted
      const list = raw[entered]
      if (list) list.push(who)
      else {
        raw[entered] = [who]
        // 'close' comes once per response, whether it finished or the client left first
        raw.once('close', () => {
          for (const w of raw[entered]!) leave(w)
        })
      }
    },
  }
}
