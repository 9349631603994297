/**
 * The contracts of the fleet as data, for the release snapshot (release/contracts.json) and the
 * compatibility check: per service its NATS endpoints (subject, request and reply JSON Schema),
 * the messages it publishes or consumes (topics, stream messages), its JetStream streams (name,
 * subjects), the other names its channels hold (durable consumers, KV buckets), and its HTTP
 * routes (method, url, the schema of each request part and of each answer by status).
 *
 * Read from @ats/contracts itself: `serviceContracts`, each one's routes and its channels in the
 * default namespace. A channel's codecs do not show their schemas, so the contracts are loaded
 * through schemaRecorder.mjs, which records the schema of every codec made.
 */
import { register } from 'node:module'

export type JsonSchema = Record<string, unknown>

export interface EndpointContract {
  /** where it is in the service's channels: `keyVerify`, `payments.charged` */
  name: string
  subject: string
  request: JsonSchema
  response: JsonSchema
}

export interface MessageContract {
  name: string
  subject: string
  message: JsonSchema
}

export interface StreamContract {
  name: string
  subjects: string[]
}

export interface RouteContract {
  method: string
  url: string
  params?: JsonSchema
  querystring?: JsonSchema
  headers?: JsonSchema
  body?: JsonSchema
  /** the answer's schema by status code */
  response: Record<string, JsonSchema>
  /** the schema of each server-sent event, for a route that also answers with a stream */
  events?: JsonSchema
}

export interface ServiceContracts {
  endpoints: EndpointContract[]
  messages: MessageContract[]
  streams: StreamContract[]
  /** other names the channels hold (durable consumers, KV buckets, dead-letter subjects), by where they are */
  names: Record<string, string>
  routes: RouteContract[]
}

/** A parameterised channel (`events(jobId)`) is read with this in place of its parameter: a subject wildcard. */
const anyToken = '*'

interface ContractsModule {
  serviceContracts: Record<string, { routes: Record<string, RouteLike>; channels(namespace: string): unknown }>
  defaultNamespace: string
  schemaOfCodec?: WeakMap<object, JsonSchema>
}

interface RouteLike {
  method: string
  url: string
  alsoProduces?: { schema: unknown }
  schema: { params?: unknown; querystring?: unknown; headers?: unknown; body?: unknown; response: Record<number, unknown> }
}

let recorderRegistered = false

/**
 * Loads @ats/contracts with the codec recorder. It must be the first load of the contracts in
 * this process: a copy loaded before has no record of its codecs (an error says so).
 */
async function loadContracts(): Promise<Required<ContractsModule>> {
  if (!recorderRegistered) {
    register(new URL('./schemaRecorder.mjs', import.meta.url))
    recorderRegistered = true
  }
  const contracts = (await import('@ats/contracts')) as unknown as ContractsModule
  if (!contracts.schemaOfCodec) {
    throw new Error('@ats/contracts was loaded before the release checks could record its schemas: read the contracts first in the process')
  }
  return contracts as Required<ContractsModule>
}

/** A TypeBox schema as JSON Schema: what JSON.stringify keeps of it (TypeBox's own marks are symbols). */
const plain = (schema: unknown): JsonSchema => JSON.parse(JSON.stringify(schema)) as JsonSchema

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/** Every service's contracts, by service name, in the default namespace. */
export async function readContracts(): Promise<Record<string, ServiceContracts>> {
  const contracts = await loadContracts()
  const schemaOf = (codec: unknown, where: string): JsonSchema => {
    const schema = isObject(codec) ? contracts.schemaOfCodec.get(codec) : undefined
    if (!schema) throw new Error(`${where}: its codec was not made by @ats/contracts' codec(), so its schema cannot be read`)
    return plain(schema)
  }
  const services: Record<string, ServiceContracts> = {}
  for (const [service, contract] of Object.entries(contracts.serviceContracts)) {
    const found: ServiceContracts = { endpoints: [], messages: [], streams: [], names: {}, routes: [] }
    const visit = (value: unknown, name: string): void => {
      if (typeof value === 'function') {
        visit(value(anyToken), name)
        return
      }
      if (typeof value === 'string') {
        found.names[name] = value
        return
      }
      if (!isObject(value)) return
      if (typeof value.subject === 'string' && 'request' in value && 'reply' in value) {
        const where = `${service} endpoint ${name}`
        found.endpoints.push({
          name,
          subject: value.subject,
          request: schemaOf(value.request, where),
          response: schemaOf(value.reply, where),
        })
        return
      }
      if (typeof value.subject === 'string' && 'message' in value) {
        found.messages.push({ name, subject: value.subject, message: schemaOf(value.message, `${service} message ${name}`) })
        return
      }
      if (typeof value.name === 'string' && Array.isArray(value.subjects)) {
        found.streams.push({ name: value.name, subjects: value.subjects.map(String) })
        return
      }
      for (const [key, inner] of Object.entries(value)) visit(inner, name ? `${name}.${key}` : key)
    }
    visit(contract.channels(contracts.defaultNamespace), '')
    for (const route of Object.values(contract.routes)) {
      const { params, querystring, headers, body, response } = route.schema
      found.routes.push({
        method: route.method,
        url: route.url,
        ...(params ? { params: plain(params) } : {}),
        ...(querystring ? { querystring: plain(querystring) } : {}),
        ...(headers ? { headers: plain(headers) } : {}),
        ...(body ? { body: plain(body) } : {}),
        response: Object.fromEntries(Object.entries(response).map(([status, schema]) => [status, plain(schema)])),
        ...(route.alsoProduces ? { events: plain(route.alsoProduces.schema) } : {}),
      })
    }
    services[service] = found
  }
  return services
}
