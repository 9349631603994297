// The kit's face: what services, the gateway, scripts and tests use, listed by name rather than
// `export *` of every module, so the kit's public surface is what this file shows. A name not
// listed here is the kit's own; export it when a service needs it, from the module that owns it.
export { StartupError, databaseSettings, httpUrlSetting, isHttpUrl, loadConfig, msSetting, packageVersion, safeUrl } from './config.ts'
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
  clientErrorStatus,
  createError,
  errorBody,
  errorHandler,
  firstLine,
  installErrorHandler,
  publicFailure,
  type ErrorFormat,
} from './errors.ts'
export { createService, runService, settingsOf, type AnyServiceDefinition, type ServiceConfig, type ServiceDefinition } from './service.ts'
export { ensureStream, openBucket, publishTraced } from './jetstream.ts'
export { addNatsService, callEndpoint, publish, serveEndpoint, subscribe, type CallContext } from './rpc.ts'
export { connectNats } from './nats.ts'
export { startDurableConsumer, startWorkQueueConsumer, startWorkerLoop, type WorkOutcome, type WorkerLoop } from './workers.ts'
export { startOutbox } from './outbox.ts'
export { eventOwner, newEventId, recordEvent, startEventOutbox, type EventOutbox, type EventToRecord } from './events.ts'
export { cachedLoader } from './cache.ts'
export { createSharedCache, type SharedCache } from './sharedCache.ts'
export { REPLICA_ACK_TIMEOUT_MS, connectRedis, replicaAcknowledgement, type SentinelOptions } from './redis.ts'
export { createChainContext, type ChainContext } from './chain.ts'
export {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  batchSpanSpec,
  inSpan,
  injectHttp,
  requestTraceContext,
  traceContext,
  tracingEnabled,
  type Context,
} from './tracing.ts'
export { migrate } from './migrator.ts'
export type { Logger } from './logger.ts'
export type { CounterMetric, ServiceMetrics } from './metrics.ts'
export type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
export { createHttpClient, type HttpClient } from './http.ts'
export { createIdempotencyStore, fingerprintOf, idempotencyKeyOf, startIdempotencyPurge, type IdempotencyStore } from './idempotency.ts'
