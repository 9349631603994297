// One timed run of a target with autocannon: req/s, p99 and the server's CPU per request.

import autocannon from 'autocannon'
import { cpuMicros } from '../processes.ts'
import type { RoundResult } from './rounds.ts'

export interface AutocannonRoundOptions {
  /** for error messages */
  name: string
  url: string
  seconds: number
  connections: number
  headers?: Record<string, string>
  /** autocannon request definitions (e.g. a setupRequest giving every request a header of its own) */
  requests?: autocannon.Request[]
  /** the server process whose CPU is divided by the requests answered (cpuMicrosPerRequest) */
  pid?: number
  /** handed a function that ends the round early */
  onStart?: (stop: () => void) => void
  /** headers for the one request sent to show what the target answers when a round saw non-2xx answers or errors */
  probeHeaders?: () => Record<string, string>
}

/** One timed autocannon round. Throws when any answer was not 2xx or any request failed. */
export async function autocannonRound(options: AutocannonRoundOptions): Promise<RoundResult> {
  const { url, seconds, connections, headers = {}, pid } = options
  const before = pid === undefined ? Number.NaN : cpuMicros(pid)
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      { url, connections, duration: seconds, headers, ...(options.requests ? { requests: options.requests } : {}) },
      (error, result) => (error ? reject(error) : resolve(result)),
    )
    options.onStart?.(() => instance.stop())
  })
  const cpu = pid === undefined ? Number.NaN : cpuMicros(pid) - before
  if (result.non2xx > 0 || result.errors > 0) {
    const statuses = Object.entries(result.statusCodeStats ?? {}).map(([code, { count }]) => `${count} × ${code}`)
    const sample = await fetch(url, { headers: { ...headers, ...options.probeHeaders?.() } })
      .then(async (res) => `${res.status} ${(await res.text()).slice(0, 300)}`)
      .catch((error: Error) => error.message)
    throw new Error(
      `${options.name} (${url}): ${result.non2xx} non-2xx answers (${statuses.join(', ')}), ${result.errors} errors; one more request now: ${sample}`,
    )
  }
  return {
    rps: result.requests.average,
    p99: result.latency.p99,
    requests: result.requests.total,
    ...(pid === undefined ? {} : { cpuMicrosPerRequest: cpu / result.requests.total }),
  }
}
