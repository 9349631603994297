import { randomUUID } from 'node:crypto'
import { identityHeaders, natsChannels, type Identity, type NatsChannels } from '@ats/contracts'
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import type { NatsConnection } from 'nats'
import { Type, type Static, type TObject, type TProperties } from 'typebox'
import type { Redis } from 'ioredis'
import { chainSettings, checkAddressBook, createChainContext, serverWalletSettings, type ChainConfig, type ChainContext } from './chain.ts'
import { StartupError, baseSettings, databaseSettings, loadConfig, redisSentinelSettings, redisUrlSetting } from './config.ts'
import { createDatabase, type DatabaseClient, type DatabaseOptions } from './database.ts'
import { installErrorHandler, withTimeout } from './errors.ts'
import { installIdentity, operationalRoutes } from './identity.ts'
import { trackConnections } from './connections.ts'
import { createLogger, type Logger } from './logger.ts'
import { installMetrics, serviceMetrics, type ServiceMetrics } from './metrics.ts'
import { hardenRouteSchema, kitKeywords } from './validation.ts'
import { migrate } from './migrator.ts'
import { setJetStreamReplicas } from './jetstream.ts'
import { connectNats } from './nats.ts'
import { connectRedis } from './redis.ts'
import { stopServing } from './rpc.ts'
import { flushTraces, installRequestTracing, startTracing, tracingEnabled } from './tracing.ts'

/** A stopping process exits by then whatever is left (Kubernetes gives 30 s before SIGKILL). */
const shutdownLimitMs = 10_000
/** How long a stop waits for the NATS requests it already took, within that limit. */
const handlerDrainMs = 7_000

/** The settings the kit itself reads: every process's (baseSettings), and those of what a definition declares (kitSettings). */
export type KitConfig = Static<TObject<typeof baseSettings>> & {
  PORT: number
  DATABASE_URL?: string
  /** the edge's port and interface for /ready and /metrics */
  OPS_PORT?: number
  OPS_HOST?: string
  REDIS_URL?: string
  REDIS_SENTINELS?: string
  REDIS_SENTINEL_MASTER?: string
}
export type ServiceConfig<S extends TProperties> = KitConfig & Static<TObject<S>>

/** What every service's context holds, whatever it declares. */
export interface KitContext<S extends TProperties> {
  name: string
  version: string
  config: ServiceConfig<S>
  nc: NatsConnection
  /** the subjects, streams and buckets of this fleet's NATS namespace, by service */
  channels: NatsChannels
  log: Logger
  /** for services that declare `redis`: the connection, or undefined when optional and REDIS_URL is unset */
  redis: Redis | undefined
  /** run on shutdown, after the server stopped taking requests and before NATS drains */
  onClose(hook: () => Promise<void> | void): void
  /** adds a dependency that /ready checks, beside Postgres and NATS */
  addReadinessCheck(name: string, check: ReadinessCheck): void
  /** the service's own counters and gauges, on its /metrics beside the kit's */
  metrics: ServiceMetrics
}

/** How a service uses the chain: 'read' (clients, address book), or 'write' (also the server wallet). */
export type ChainMode = 'read' | 'write'

/**
 * `Then` for what a service declares, `Else` (nothing) for what it does not: a type parameter
 * that is `never` means "not declared". `[X] extends [never]` is how TypeScript asks "is X never?".
 */
type IfDeclared<X, Then, Else = unknown> = [X] extends [never] ? Else : Then

/**
 * The context `register` gets: the kit's, plus `db` (its Prisma client, `Db`) and `chain` only for
 * a service that declares them. Reaching `ctx.chain` in a service without `chain` is a type error,
 * not an undefined at run time.
 */
export type ServiceContext<S extends TProperties, Db = never, Chain extends ChainMode = never> = KitContext<S> &
  IfDeclared<Db, { /** the service's Prisma client, on its migrated schema */ db: Db }> &
  IfDeclared<Chain, { /** clients, address book, server wallet and its sender */ chain: ChainContext }>

/** A readiness check: resolves when the dependency answers, throws otherwise. */
export type ReadinessCheck = () => Promise<unknown>

/**
 * A service: what it declares, and its routes. The type parameters say what it declares and
 * must match its fields (the compiler checks both ways):
 * - `S`: its own settings (`typeof settings`; `{}` for none)
 * - `Db`: its Prisma client when it declares `database`, else `never` (the default)
 * - `Chain`: 'read' or 'write' when it declares `chain`, else `never` (the default)
 * e.g. `ServiceDefinition<typeof settings, PrismaClient, 'write'>`. `register` then gets
 * `ctx.db` and `ctx.chain` exactly when they exist (ServiceContext).
 */
export type ServiceDefinition<S extends TProperties, Db extends DatabaseClient = never, Chain extends ChainMode = never> = ServiceFields<
  S,
  Db,
  Chain
> &
  IfDeclared<Db, { /** the service's Prisma schema; migrated at start */ database: DatabaseOptions<Db> }, { database?: undefined }> &
  IfDeclared<
    Chain,
    {
      /** the chain (RPC_URL, CHAIN_ID, ADDRESS_BOOK): 'read', or 'write' with SERVER_WALLET_PRIVATE_KEY (sent through `ctx.chain.sender()`) */
      chain: Chain
    },
    { chain?: undefined }
  >

/** What code about every service reads of a definition (settingsOf, the fleet's list, migrations): any definition is one. */
export type AnyServiceDefinition = Pick<
  ServiceFields<TProperties, never, never>,
  'name' | 'version' | 'port' | 'settings' | 'edge' | 'redis'
> & {
  database?: DatabaseOptions<any>
  chain?: ChainMode
}

/** The fields every definition has, whatever it declares. */
interface ServiceFields<S extends TProperties, Db, Chain extends ChainMode> {
  name: string
  version: string
  /** port when PORT is unset */
  port: number
  /** the service's own settings, validated with the kit's */
  settings?: S
  /**
   * the gateway answers clients directly: no internal token, its own request ids, and /ready
   * and /metrics on a port of their own (OPS_PORT), never on the public one
   */
  edge?: boolean
  /** Redis (REDIS_URL): 'required', or 'optional' (unset: undefined) */
  redis?: 'required' | 'optional'
  /** extra Fastify options (body limits, router options, trustProxy), fixed or from the settings */
  fastify?: Partial<FastifyServerOptions> | ((config: ServiceConfig<S>) => Partial<FastifyServerOptions>)
  /** registers routes, hooks and NATS endpoints; runs after the kit's own plugins */
  register(app: FastifyInstance, ctx: ServiceContext<S, Db, Chain>): Promise<void>
}

export interface Service<S extends TProperties, Db = never, Chain extends ChainMode = never> {
  app: FastifyInstance
  /** the edge's operational server (/ready, /metrics); the app itself for services */
  ops: FastifyInstance
  ctx: ServiceContext<S, Db, Chain>
  listen(): Promise<string>
  /** where /ready and /metrics answer, once listening */
  opsUrl(): string
  close(): Promise<void>
}

const portSetting = (port: number, description: string) => Type.Integer({ minimum: 0, maximum: 65535, default: port, description })

/** The kit's settings for what a definition declares. */
function kitSettings(definition: AnyServiceDefinition): TProperties {
  return {
    PORT: portSetting(definition.port, 'HTTP port'),
    ...baseSettings,
    ...(definition.edge
      ? {
          OPS_PORT: portSetting(definition.port + 6000, 'port of /ready and /metrics'),
          OPS_HOST: Type.Optional(
            Type.String({ minLength: 1, description: 'interface of /ready and /metrics (unset: HOST); pnpm start uses 127.0.0.1' }),
          ),
        }
      : {}),
    ...(definition.database ? databaseSettings : {}),
    ...(definition.redis
      ? { REDIS_URL: definition.redis === 'required' ? redisUrlSetting : Type.Optional(redisUrlSetting), ...redisSentinelSettings }
      : {}),
    ...(definition.chain ? chainSettings : {}),
    ...(definition.chain === 'write' ? serverWalletSettings : {}),
  }
}

/** Every setting a process of this definition reads: the kit's (by what it declares) and its own. */
export function settingsOf(definition: AnyServiceDefinition): TProperties {
  return { ...kitSettings(definition), ...(definition.settings ?? {}) }
}

/**
 * Builds one process of the fleet: config, migrations, NATS, Prisma, Fastify with
 * the kit's logging, errors, metrics, health and readiness, then the service's
 * own routes. Nothing listens until `listen()`.
 */
export async function createService<S extends TProperties, Db extends DatabaseClient = never, Chain extends ChainMode = never>(
  definition: ServiceDefinition<S, Db, Chain>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Service<S, Db, Chain>> {
  const config = {
    ...(loadConfig(kitSettings(definition), env) as unknown as KitConfig),
    ...loadConfig(definition.settings ?? ({} as S), env),
  } as ServiceConfig<S>
  if (definition.chain) checkAddressBook(config as unknown as ChainConfig)
  // first: the logger writes trace ids, and the database and chain clients make spans, only when it is on
  await startTracing(definition.name, definition.version, config)
  let db: Db | undefined
  if (definition.database && config.DATABASE_URL) {
    await migrate(config.DATABASE_URL, { schema: definition.database.schema, dir: definition.database.migrations })
    db = createDatabase(config.DATABASE_URL, definition.database)
  }
  const logger = createLogger(definition.name, config.LOG_LEVEL)
  const nc = await connectNats(config.NATS_URL, definition.name).catch(async (error) => {
    await db?.$disconnect()
    throw error
  })
  setJetStreamReplicas(nc, config.JETSTREAM_REPLICAS)
  const redis = config.REDIS_URL
    ? await connectRedis(
        config.REDIS_URL,
        logger,
        config.REDIS_SENTINELS ? { sentinels: config.REDIS_SENTINELS, master: config.REDIS_SENTINEL_MASTER! } : undefined,
      ).catch(async (error) => {
        await nc.close()
        await db?.$disconnect()
        throw error
      })
    : undefined

  const chain = definition.chain ? createChainContext(config as unknown as ChainConfig, logger) : undefined
  const closeHooks: Array<() => Promise<void> | void> = []
  const checks: Record<string, ReadinessCheck> = { nats: () => nc.flush() }
  if (db) checks.postgres = () => db.$queryRawUnsafe('SELECT 1')
  if (redis) checks.redis = () => redis.ping()

  const app = Fastify({
    loggerInstance: logger,
    // one line per request, written by the onResponse hook below
    logController: new LogController({ disableRequestLogging: true }),
    // every problem is collected, so a 400 names all the missing fields at once; an unknown
    // field is refused, not dropped (Fastify's default): a misspelt limit must not pass silently;
    // the kit's keywords refuse control characters and unbounded numbers (validation.ts)
    ajv: { customOptions: { allErrors: true, removeAdditional: false }, plugins: [kitKeywords] },
    bodyLimit: config.BODY_LIMIT_BYTES,
    requestIdHeader: definition.edge ? false : identityHeaders.requestId,
    genReqId: () => randomUUID(),
    ...(typeof definition.fastify === 'function' ? definition.fastify(config) : definition.fastify),
  })
  const connections = trackConnections(app.server)
  // the edge keeps /ready and /metrics off its public port
  const ops: FastifyInstance = definition.edge
    ? (Fastify({ loggerInstance: logger, logController: new LogController({ disableRequestLogging: true }) }) as unknown as FastifyInstance)
    : (app as unknown as FastifyInstance)
  installErrorHandler(app)
  if (ops !== app) installErrorHandler(ops)
  app.addHook('onRoute', hardenRouteSchema)
  app.decorateRequest('identity', null as unknown as Identity)
  const { observe, registry } = installMetrics(ops, definition.name)
  const kit: KitContext<S> = {
    name: definition.name,
    version: definition.version,
    config,
    nc,
    channels: natsChannels(config.NATS_NAMESPACE),
    log: logger,
    redis,
    onClose: (hook) => closeHooks.push(hook),
    addReadinessCheck: (name, check) => {
      checks[name] = check
    },
    metrics: serviceMetrics(registry, logger),
  }
  // db and chain exist exactly when the definition declares them, as its type says (ServiceContext)
  const ctx = { ...kit, ...(db ? { db } : {}), ...(chain ? { chain } : {}) } as ServiceContext<S, Db, Chain>

  // only when on: off, requests pay for no hook at all; installed before the log line's hook, which it wraps
  if (tracingEnabled()) installRequestTracing(app, definition.name, definition.edge === true)
  // One hook, callback style: it runs on every request of the gateway's hot path.
  app.addHook('onResponse', (request, reply, done) => {
    observe(request, reply)
    if (!operationalRoutes.has(request.routeOptions.url ?? '')) {
      request.log.info(
        { method: request.method, url: request.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 },
        'request',
      )
    }
    done()
  })
  if (!definition.edge) installIdentity(app, config.INTERNAL_TOKEN)

  app.get('/health', { logLevel: 'warn' }, async () => ({ ok: true, ts: Date.now() }))
  ops.get('/ready', { logLevel: 'warn' }, async (request, reply) => {
    const failed: string[] = []
    await Promise.all(
      Object.entries(checks).map(async ([name, check]) => {
        try {
          await withTimeout(check(), 2000, () => new Error('no answer within 2000 ms'))
        } catch (error) {
          failed.push(name)
          request.log.warn({ check: name, err: error }, 'readiness check failed')
        }
      }),
    )
    if (failed.length > 0) return reply.code(503).send({ error: `not ready: ${failed.sort().join(', ')} unreachable` })
    return { ready: true, checks: Object.keys(checks).sort() }
  })

  let closing: Promise<void> | undefined
  const close = () =>
    (closing ??= (async () => {
      // keep-alive connections become idle as their answers in flight finish:
      // close them as they do, so closing does not wait for clients to hang up
      const idle = setInterval(() => {
        app.server.closeIdleConnections()
        connections.closeIdle()
      }, 50)
      await app.close().finally(() => clearInterval(idle))
      if (ops !== app) await ops.close()
      // NATS requests already taken get their replies before anything they use is closed
      const unfinished = await stopServing(nc, handlerDrainMs)
      if (unfinished > 0) app.log.warn({ unfinished }, 'stopped with NATS requests still being handled')
      for (const hook of closeHooks.reverse()) await hook()
      await chain?.close()
      if (!nc.isClosed()) await nc.drain().catch(() => {})
      if (redis) await redis.quit().catch(() => redis.disconnect())
      await db?.$disconnect()
      await flushTraces()
    })())

  try {
    await definition.register(app, ctx)
  } catch (error) {
    // a service that cannot start leaves nothing open behind it
    await close().catch(() => {})
    throw error
  }

  let opsAddress: string | undefined
  return {
    app,
    ops,
    ctx,
    close,
    opsUrl: () => opsAddress ?? '',
    listen: async () => {
      const address = await app.listen({ port: config.PORT, host: config.HOST })
      opsAddress = ops === app ? address : await ops.listen({ port: config.OPS_PORT ?? 0, host: config.OPS_HOST ?? config.HOST })
      return address
    },
  }
}

/**
 * The entry point of every server.ts: builds, listens, and on SIGTERM/SIGINT stops
 * taking requests, drains NATS and closes Prisma. A start-up problem an operator
 * can fix prints one line naming it and exits 1, never a stack trace.
 */
export async function runService<S extends TProperties, Db extends DatabaseClient = never, Chain extends ChainMode = never>(
  definition: ServiceDefinition<S, Db, Chain>,
): Promise<void> {
  let service: Service<S, Db, Chain>
  try {
    service = await createService(definition)
    const address = await service.listen()
    const ops = service.opsUrl() === address ? {} : { ops: service.opsUrl() }
    service.app.log.info({ address, ...ops, version: definition.version }, `${definition.name} listening`)
  } catch (error) {
    const message = error instanceof StartupError ? error.message : `failed to start: ${(error as Error).message}`
    process.stderr.write(`${definition.name}: ${message}\n`)
    process.exit(1)
  }
  let stopping = false
  const stop = (signal: string) => {
    if (stopping) return
    stopping = true
    service.app.log.info({ signal }, 'shutting down')
    const force = setTimeout(() => process.exit(1), shutdownLimitMs)
    force.unref()
    service
      .close()
      .then(() => process.exit(0))
      .catch((error) => {
        service.app.log.error({ err: error }, 'shutdown failed')
        process.exit(1)
      })
  }
  process.once('SIGTERM', () => stop('SIGTERM'))
  process.once('SIGINT', () => stop('SIGINT'))
}
