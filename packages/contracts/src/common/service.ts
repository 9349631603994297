import type { ApiRoute } from './route.ts'

/**
 * What a service promises the rest of the fleet: its public routes (validated by the service,
 * documented by the gateway) and its NATS channels in one namespace. Each service's folder
 * exports one; `src/index.ts` registers it.
 */
export interface ServiceContract<Routes extends Record<string, ApiRoute>, Channels> {
  name: string
  routes: Routes
  /** the subjects, streams and buckets of this service in a fleet's namespace */
  channels(namespace: string): Channels
}

export function serviceContract<Routes extends Record<string, ApiRoute>, Channels>(
  contract: ServiceContract<Routes, Channels>,
): ServiceContract<Routes, Channels> {
  return contract
}
