// The kit's face: what services, the gateway, scripts and tests use, listed by name rather than
// `export *` of every module, so the kit's public surface is what this file shows. A name not
// listed here is the kit's own; export it when a service needs it, from the module that owns it.
export { StartupError, databaseSettings, httpUrlSetting, isHttpUrl, loadConfig, msSetting, paymentSettings, safeUrl } from './config.ts'
export { localInfra, portOpen } from './localInfra.ts'
export {
  BadRequest,
  BodyTooLarge,
  Forbidden,
  IdempotencyInProgress,
  NotFound,
  ServiceCallError,
  Unauthorized,
  Unavailable,
  UpstreamFailed,
  UpstreamRateLimited,
  UpstreamStatusError,
  UpstreamTimeout,
  WalletPaused,
  clientErrorStatus,
  createError,
  errorBody,
  errorHandler,
  installErrorHandler,
  publicFailure,
  type ErrorFormat,
} from './errors.ts'
export {
  createService,
  runService,
  settingsOf,
  type AnyServiceDefinition,
  type ChainMode,
  type KitConfig,
  type KitContext,
  type ReadinessCheck,
  type Service,
  type ServiceConfig,
  type ServiceContext,
  type ServiceDefinition,
} from './service.ts'
export { ensureStream, openBucket, publishTraced, setJetStreamReplicas, type StreamSpec } from './jetstream.ts'
export { addNatsService, callEndpoint, publish, serveEndpoint, subscribe, type CallContext } from './rpc.ts'
export {
  startDurableConsumer,
  startWorkQueueConsumer,
  startWorkerLoop,
  type Delivery,
  type DurableConsumerOptions,
  type WorkItem,
  type WorkOutcome,
  type WorkQueueOptions,
  type WorkerLoop,
  type WorkerLoopOptions,
} from './workers.ts'
export { startOutbox, type Outbox, type OutboxOptions } from './outbox.ts'
export {
  eventOwner,
  newEventId,
  recordEvent,
  startEventOutbox,
  type EventOutbox,
  type EventOutboxOptions,
  type EventToRecord,
  type RawExecutor,
} from './events.ts'
export { cachedLoader, type CachedLoader, type CachedLoaderOptions } from './cache.ts'
export { createSharedCache, type CacheHit, type SharedCache, type SharedCacheOptions } from './sharedCache.ts'
export { createChainContext, type ChainConfig, type ChainContext, type SignedTx, type WalletSender } from './chain.ts'
export {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  batchSpanSpec,
  inSpan,
  injectHttp,
  requestTraceContext,
  startTracing,
  traceContext,
  tracesUrl,
  tracingEnabled,
  type Context,
  type Span,
  type SpanSpec,
} from './tracing.ts'
export { migrate, type MigrationPlan, type MigrationResult } from './migrator.ts'
export { callContextOf, operationalRoutes } from './identity.ts'
export { redactedHeaders, type Logger } from './logger.ts'
export type { CounterMetric, GaugeMetric, GaugeOptions, LabelValuesOf, MetricLabels, MetricOptions, ServiceMetrics } from './metrics.ts'
export type { DatabaseClient, DatabaseOptions } from './database.ts'
export type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
export { createHttpClient, type HttpClient, type HttpClientOptions, type Query, type QueryValue, type RequestOptions } from './http.ts'
export {
  createIdempotencyStore,
  fingerprintOf,
  idempotencyKeyOf,
  startIdempotencyPurge,
  type IdempotencyOptions,
  type IdempotencyStore,
} from './idempotency.ts'
export { pauseMessage, watchWalletControl, type WalletControlWatch } from './walletControl.ts'
export { databaseRoleOf, databaseRolesScript, ensureRoles, roleUrl, type DatabaseRole } from './roles.ts'
export { startNatsServer, type NatsServer } from './natsServer.ts'
