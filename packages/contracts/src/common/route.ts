import { Type, type TSchema } from 'typebox'

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'

/**
 * A public route's contract: the service registers it (validation and types come
 * from the schema) and the gateway documents it (OpenAPI). One declaration, two uses.
 */
export interface ApiRoute {
  method: HttpMethod
  url: string
  summary: string
  /** the media type of success answers when not JSON (server-sent events) */
  produces?: 'text/event-stream'
  /** a second media type of success answers, chosen by the request (`stream: true`): its schema per event */
  alsoProduces?: { mediaType: 'text/event-stream'; schema: TSchema }
  schema: {
    params?: TSchema
    querystring?: TSchema
    headers?: TSchema
    body?: TSchema
    response: Record<number, TSchema>
  }
}

/** The params of a route on one record: its `:id`. */
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })

export function route<R extends ApiRoute>(definition: R): R {
  return definition
}
