import type { LoggerOptions } from 'pino'

/** Header values that are credentials: never written to a log. */
export const redactedHeaders = ['authorization', 'x-payment', 'payment-signature', 'x-ats-internal-token', 'cookie']

export function loggerOptions(name: string, level: string): LoggerOptions {
  return {
    level,
    base: { service: name },
    redact: { paths: redactedHeaders.map((h) => `req.headers["${h}"]`), censor: '[redacted]' },
  }
}
