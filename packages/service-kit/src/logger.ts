import { pino, type LevelWithSilent, type LogFn, type LoggerOptions } from 'pino'
import { activeTraceId, tracingEnabled } from './tracing.ts'

/** Header values that are credentials: never written to a log. */
export const redactedHeaders = ['authorization', 'x-api-key', 'x-payment', 'payment-signature', 'x-ats-internal-token', 'cookie']

/**
 * The kit's logger type: what NATS endpoints, consumers and worker loops log through. Fastify's
 * `app.log` and any pino logger are one, so that code needs no Fastify to log.
 */
export interface Logger {
  level: LevelWithSilent | string
  fatal: LogFn
  error: LogFn
  warn: LogFn
  info: LogFn
  debug: LogFn
  trace: LogFn
  child(bindings: Record<string, unknown>): Logger
}

const noTrace = Object.freeze({})

/** The active span's trace id on every line written inside one (next to Fastify's reqId). */
function traceMixin(): object {
  const traceId = activeTraceId()
  return traceId ? { trace_id: traceId } : noTrace
}

export function loggerOptions(name: string, level: string): LoggerOptions {
  return {
    level,
    base: { service: name },
    redact: { paths: redactedHeaders.map((h) => `req.headers["${h}"]`), censor: '[redacted]' },
    // only with tracing on: off, a line costs no lookup
    ...(tracingEnabled() ? { mixin: traceMixin } : {}),
  }
}

type Destination = ReturnType<typeof pino.destination>

// One timer and one exit hook for every logger of the process (tests build many services in one)
const destinations = new Set<Destination>()
let flushing: NodeJS.Timeout | undefined

/**
 * The process logger. Lines are buffered (32 KiB) and written asynchronously: a
 * write syscall per request line cost the gateway ~15% of its throughput, and one
 * per 4 KiB still ~4% of the keyed route's CPU (issue 26). The buffer is flushed
 * every 250 ms and on exit.
 */
export function createLogger(name: string, level: string): pino.Logger {
  const destination = pino.destination({ dest: 1, sync: false, minLength: 32 * 1024, maxWrite: 64 * 1024 })
  destinations.add(destination)
  if (!flushing) {
    flushing = setInterval(() => {
      for (const d of destinations) d.flush()
    }, 250).unref()
    process.once('exit', () => {
      for (const d of destinations) d.flushSync()
    })
  }
  return pino(loggerOptions(name, level), destination)
}
