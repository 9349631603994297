import { readFileSync } from 'node:fs'
import { defaultNamespace, namespacePattern } from '@ats/contracts'
import { Type, type Static, type TObject, type TProperties, type TSchema, type TStringOptions } from 'typebox'
import { Compile } from 'typebox/compile'
import Value from 'typebox/value'
import { localInfra } from './localInfra.ts'

/** A start-up problem an operator fixes with a setting: printed as one line, exit 1. */
export class StartupError extends Error {
  override name = 'StartupError'
}

/** Whether `value` is an absolute http(s) URL, as the HTTP clients and the proxy need it. */
export function isHttpUrl(value: string): boolean {
  try {
    return ['http:', 'https:'].includes(new URL(value).protocol)
  } catch {
    return false
  }
}

/**
 * A setting holding an http(s) URL. JSON Schema's `format: 'uri'` takes `localhost:3000` (a URI
 * of scheme "localhost") and `ftp://…`, which start fine and fail every request after.
 */
export const httpUrlSetting = (options: TStringOptions & { default?: string; secret?: boolean } = {}) =>
  Type.Refine(Type.String(options), isHttpUrl, () => 'must be an absolute http(s) URL, like http://host:port')

/** The largest delay Node's timers take; a longer one fires at once (after a TimeoutOverflowWarning). */
const maxTimerMs = 2 ** 31 - 1

/** A duration setting in milliseconds; name it `_MS`, and loadConfig refuses more than timers take whatever `maximum` says. */
export const msSetting = (description: string, fallback: number, minimum = 100, maximum?: number) =>
  Type.Integer({ minimum, ...(maximum === undefined ? {} : { maximum }), default: fallback, description })

/** Settings every process of the fleet reads. */
export const baseSettings = {
  HOST: Type.String({ default: '0.0.0.0', description: 'interface to listen on' }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
    { default: 'info', description: 'pino log level' },
  ),
  NATS_URL: Type.String({ default: localInfra.natsUrl, secret: true, description: 'NATS server(s), comma-separated' }),
  NATS_NAMESPACE: Type.String({
    pattern: namespacePattern,
    default: defaultNamespace,
    description: "prefix of the fleet's NATS subjects, stream and bucket; fleets sharing one NATS need one each",
  }),
  JETSTREAM_REPLICAS: Type.Integer({
    minimum: 1,
    maximum: 5,
    default: 1,
    description:
      "how many NATS servers keep a copy of every stream, consumer and key-value bucket; 3 in production on a 3-node cluster; at most the cluster's size",
  }),
  BODY_LIMIT_BYTES: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    default: 1024 * 1024,
    description: 'largest request body, in bytes; a larger one is a 413 at the gateway, before any service (set it once for the fleet)',
  }),
  // the OpenTelemetry names, so a collector's docs apply as written (tracing.ts)
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(
    httpUrlSetting({
      description:
        'OTLP/HTTP collector base URL (traces are posted to its /v1/traces); with this and the next unset, tracing is off and costs nothing',
    }),
  ),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(
    httpUrlSetting({ description: 'OTLP/HTTP URL for traces, used as given; wins over OTEL_EXPORTER_OTLP_ENDPOINT' }),
  ),
  INTERNAL_TOKEN: Type.String({
    // sent as a header: a character HTTP headers cannot carry would fail every proxied request
    pattern: '^[!-~]{16,}$',
    hint: 'must be 16 or more visible ASCII characters (no spaces); make one with: openssl rand -hex 24',
    secret: true,
    description: 'shared secret the gateway sends to services; services refuse requests without it',
  }),
}

/** REDIS_URL, for services that declare `redis` (optional or required) */
export const redisUrlSetting = Type.String({ secret: true, description: 'Redis, shared by every replica of the process' })

/** Redis Sentinel, for services that declare `redis`: with sentinels, REDIS_URL gives only the password and db */
export const redisSentinelSettings = {
  REDIS_SENTINELS: Type.Optional(
    Type.String({
      pattern: '^[^\\s,:]+:[0-9]{1,5}(,[^\\s,:]+:[0-9]{1,5})*$',
      hint: 'must be host:port of each sentinel, comma-separated, like redis-sentinel-0:26379,redis-sentinel-1:26379',
      description:
        "Redis Sentinel's host:port, comma-separated: the primary is the one they name, followed through a failover, and writes that must survive one wait for a replica's copy; REDIS_URL then gives only the password and db",
    }),
  ),
  REDIS_SENTINEL_MASTER: Type.String({
    pattern: '^[A-Za-z0-9._-]+$',
    default: 'ats',
    description: 'the name the sentinels monitor the primary under (sentinel monitor <name> …)',
  }),
}

export const databaseSettings = {
  DATABASE_URL: Type.String({
    default: localInfra.databaseUrl,
    secret: true,
    description: 'PostgreSQL connection URL; each service uses its own schema in it',
  }),
}

/** What is wrong with a value its schema accepts: a `_MS` setting past what timers take, an integer past 2^53 - 1. */
function beyondSchema(name: string, value: unknown): string | undefined {
  if (typeof value !== 'number') return undefined
  if (name.endsWith('_MS') && value > maxTimerMs) return `must be at most ${maxTimerMs} ms (about 24 days)`
  if (Number.isInteger(value) && !Number.isSafeInteger(value))
    return `must be between -${Number.MAX_SAFE_INTEGER} and ${Number.MAX_SAFE_INTEGER}`
  return undefined
}

/** The validator's words, or the schema's `hint` (how to make a good value), said plainly for booleans. */
function problemOf(schema: TSchema, message: string | undefined): string {
  const { hint, type } = schema as { hint?: string; type?: unknown }
  if (hint) return hint
  if (type === 'boolean') return 'must be true or false (or 1 or 0)'
  return message ?? 'not valid'
}

/**
 * Reads and validates settings from the environment. An empty variable counts as
 * unset. A bad one fails with a message that names it (never echoing a secret) and,
 * where the schema gives a `hint`, says how to make a good one.
 */
export function loadConfig<P extends TProperties>(properties: P, env: NodeJS.ProcessEnv = process.env): Static<TObject<P>> {
  const out: Record<string, unknown> = {}
  for (const [name, schema] of Object.entries(properties)) {
    const raw = env[name] === '' ? undefined : env[name]
    const fallback = (schema as { default?: unknown }).default
    if (raw === undefined) {
      if (fallback !== undefined) out[name] = fallback
      else if (!Type.IsOptional(schema))
        throw new StartupError(`missing setting ${name}: ${(schema as { description?: string }).description ?? 'required'}`)
      continue
    }
    const value = Value.Convert(schema, raw)
    const validator = Compile(schema)
    const problem = validator.Check(value) ? beyondSchema(name, value) : problemOf(schema, [...validator.Errors(value)][0]?.message)
    if (problem) {
      const shown = (schema as { secret?: boolean }).secret === true ? '' : ` (got ${JSON.stringify(raw)})`
      throw new StartupError(`invalid setting ${name}: ${problem}${shown}`)
    }
    out[name] = value
  }
  return out as Static<TObject<P>>
}

/** A connection URL fit for a log line or an error message: its password masked. Comma-separated lists too. */
export function safeUrl(url: string): string {
  return url
    .split(',')
    .map((one) => {
      try {
        const parsed = new URL(one.trim())
        if (parsed.password) parsed.password = '***'
        return parsed.toString()
      } catch {
        return '(unparseable URL)'
      }
    })
    .join(',')
}

/**
 * The version of the package a module belongs to, from its package.json (one folder above
 * `src/` or `dist/`): a service names the release it runs (GET /, logs, traces), set by
 * `pnpm release` in every package.json at once.
 */
export function packageVersion(moduleUrl: string): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', moduleUrl), 'utf8')) as { version?: string }
  if (!pkg.version) throw new StartupError(`${new URL('../package.json', moduleUrl).pathname} has no version`)
  return pkg.version
}
