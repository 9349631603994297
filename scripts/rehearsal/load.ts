// The rehearsals' load: paid (x402) and keyed requests through the front, every one kept as a
// Sample for the checks; shared by scripts/rehearse.ts and scripts/rehearseUpgrade.ts.
import { setTimeout as sleep } from 'node:timers/promises'

export interface Sample {
  kind: 'prompt' | 'paidRead' | 'keyed'
  route: string
  phase: string
  status: number
  ms: number
  /** the front's own answer (cut, none), if it was one */
  front?: string
  error?: string
  jsonError: boolean
  nonce?: string
  /** the payment header, and its payer (lower-case), of a paid request */
  payment?: string
  payer?: string
  jobId?: string
  final: boolean
  /** when it was sent (epoch ms) */
  at: number
}

/** every request the load sent, with what it got */
export const samples: Sample[] = []

let phase = 'steady'
/** labels the requests sent from now on (the fault or step under way) */
export const setPhase = (name: string) => {
  phase = name
}

export const ok2xx = (s: Sample) => s.status >= 200 && s.status < 300

export interface LoadContext {
  front: string
  /** keys the keyed load takes in turn (many clients, not one key with everything in flight) */
  loadKeys: string[]
  signPayment(): { header: string; nonce: string; payer: string }
}

let sent = 0

/** One request of `kind` through the front: keyed reads alternate prices and quotes over the keys; paid ones carry a fresh payment. */
export async function send(ctx: LoadContext, kind: Sample['kind'], final = false): Promise<Sample> {
  const n = sent++
  if (kind === 'keyed') {
    const headers = { authorization: `Bearer ${ctx.loadKeys[Math.floor(n / 2) % ctx.loadKeys.length]}` }
    if (n % 2 === 0) return request(ctx, kind, 'GET /market/prices', '/market/prices', { headers }, undefined, final)
    return request(ctx, kind, 'GET /swap/quote', '/swap/quote?tokenIn=USDC&tokenOut=ARB&amountIn=1000000', { headers }, undefined, final)
  }
  const payment = ctx.signPayment()
  if (kind === 'prompt') {
    const init = {
      method: 'POST',
      headers: { 'x-payment': payment.header, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'What is the price of ARB?' }),
    }
    return request(ctx, kind, 'POST /agent/prompt', '/agent/prompt', init, payment, final)
  }
  return request(ctx, kind, 'GET /agent/skills', '/agent/skills', { headers: { 'x-payment': payment.header } }, payment, final)
}

async function request(
  ctx: LoadContext,
  kind: Sample['kind'],
  route: string,
  path: string,
  init: RequestInit,
  payment: { header: string; nonce: string; payer: string } | undefined,
  final: boolean,
): Promise<Sample> {
  const started = performance.now()
  const sample: Sample = { kind, route, phase, status: 0, ms: 0, jsonError: false, final, at: Date.now() }
  if (payment) Object.assign(sample, { nonce: payment.nonce, payment: payment.header, payer: payment.payer })
  try {
    const res = await fetch(`${ctx.front}${path}`, { ...init, signal: AbortSignal.timeout(60_000) })
    sample.status = res.status
    const front = res.headers.get('x-rehearsal-front')
    if (front) sample.front = front
    const text = await res.text()
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {}
    if (res.status >= 400) {
      const error = (body as { error?: unknown } | undefined)?.error
      sample.jsonError = typeof error === 'string'
      sample.error = typeof error === 'string' ? error : text.slice(0, 200)
    } else if (kind === 'prompt') {
      sample.jobId = (body as { jobId?: string }).jobId
    }
  } catch (error) {
    sample.error = `no answer: ${(error as Error).message}`
  }
  sample.ms = performance.now() - started
  samples.push(sample)
  return sample
}

/** Sends `rate` requests a second of `kind` until stopped (open loop; at most 200 in flight). */
export function steady(ctx: LoadContext, kind: Sample['kind'], rate: number) {
  let inFlight = 0
  let skipped = 0
  const timer = setInterval(() => {
    if (inFlight >= 200) return void skipped++
    inFlight++
    void send(ctx, kind).finally(() => inFlight--)
  }, 1000 / rate)
  return {
    stop: async () => {
      clearInterval(timer)
      while (inFlight > 0) await sleep(100)
      return skipped
    },
  }
}

/** A final round of 40 requests once the load has stopped: each must answer 2xx (checkRecovery). */
export async function finalRound(ctx: LoadContext): Promise<void> {
  setPhase('final')
  for (let i = 0; i < 10; i++)
    await Promise.all([send(ctx, 'prompt', true), send(ctx, 'paidRead', true), send(ctx, 'keyed', true), send(ctx, 'keyed', true)])
}

/** Latency by phase, one line each (ms, every route). */
export function latencyLines(): string[] {
  const phases = [...new Set(samples.map((s) => s.phase))]
  const width = Math.max(17, ...phases.map((name) => name.length + 1))
  return phases.map((name) => {
    const of = samples.filter((s) => s.phase === name)
    const ms = of.map((s) => s.ms).sort((a, b) => a - b)
    const at = (p: number) => Math.round(ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]!)
    return `  ${name.padEnd(width)} ${String(of.length).padStart(5)} requests, ${String(of.filter(ok2xx).length).padStart(5)} 2xx, p50 ${at(0.5)}, p99 ${at(0.99)}, max ${at(1)}`
  })
}
