import { defaultNamespace, namespacePattern } from '@ats/contracts'
import { Type, type Static, type TObject, type TProperties, type TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import Value from 'typebox/value'

/** A start-up problem an operator fixes with a setting: printed as one line, exit 1. */
export class StartupError extends Error {
  override name = 'StartupError'
}

/** Settings every process of the fleet reads. */
export const baseSettings = {
  HOST: Type.String({ default: '0.0.0.0', description: 'interface to listen on' }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
    { default: 'info', description: 'pino log level' },
  ),
  NATS_URL: Type.String({ default: 'nats://127.0.0.1:4222', secret: true, description: 'NATS server(s), comma-separated' }),
  NATS_NAMESPACE: Type.String({
    pattern: namespacePattern,
    default: defaultNamespace,
    description: "prefix of the fleet's NATS subjects, stream and bucket; fleets sharing one NATS need one each",
  }),
  INTERNAL_TOKEN: Type.String({
    minLength: 16,
    secret: true,
    description: 'shared secret the gateway sends to services; services refuse requests without it',
  }),
}

/** REDIS_URL, for services that declare `redis` (optional or required) */
export const redisUrlSetting = Type.String({ secret: true, description: 'Redis, shared by every replica of the process' })

export const databaseSettings = {
  DATABASE_URL: Type.String({
    default: 'postgresql://postgres@127.0.0.1:5432/postgres',
    secret: true,
    description: 'PostgreSQL connection URL; each service uses its own schema in it',
  }),
}

const isSecret = (schema: TSchema) => (schema as { secret?: boolean }).secret === true

/**
 * Reads and validates settings from the environment. An empty variable counts as
 * unset. A bad one fails with a message that names it (never echoing a secret).
 */
export function loadConfig<P extends TProperties>(
  properties: P,
  env: NodeJS.ProcessEnv = process.env,
): Static<TObject<P>> {
  const out: Record<string, unknown> = {}
  for (const [name, schema] of Object.entries(properties)) {
    const raw = env[name] === '' ? undefined : env[name]
    const fallback = (schema as { default?: unknown }).default
    if (raw === undefined) {
      if (fallback !== undefined) out[name] = fallback
      else if (!Type.IsOptional(schema)) throw new StartupError(`missing setting ${name}: ${(schema as { description?: string }).description ?? 'required'}`)
      continue
    }
    const value = Value.Convert(schema, raw)
    const validator = Compile(schema)
    if (!validator.Check(value)) {
      const [first] = validator.Errors(value)
      const shown = isSecret(schema) ? '' : ` (got ${JSON.stringify(raw)})`
      throw new StartupError(`invalid setting ${name}: ${first?.message ?? 'not valid'}${shown}`)
    }
    out[name] = value
  }
  return out as Static<TObject<P>>
}

/** What the gateway charges and admin records, reports and settles. */
export const paymentSettings = {
  PAYMENT_PRICE: Type.Integer({ minimum: 1, default: 10_000, description: 'price of a paid request in USDC base units (10000 = $0.01)' }),
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
