import { PrismaPg } from '@prisma/adapter-pg'
import { SpanKind, inSpan, tracingEnabled } from './tracing.ts'

/** What the kit needs of a service's generated Prisma client. */
export interface DatabaseClient {
  $queryRawUnsafe(query: string): Promise<unknown>
  $disconnect(): Promise<void>
}

export interface DatabaseOptions<Db extends DatabaseClient> {
  /** the Postgres schema the service owns (the adapter ignores ?schema= in the URL) */
  schema: string
  /** the service's prisma/migrations folder */
  migrations: string
  /** builds the service's generated PrismaClient on the given adapter */
  client: (adapter: PrismaPg) => Db
}

export function createDatabase<Db extends DatabaseClient>(url: string, options: DatabaseOptions<Db>): Db {
  // the search_path makes the service's raw SQL ($queryRaw) resolve to its own schema too
  const pool = { connectionString: url, options: `-c search_path=${options.schema}` }
  const client = options.client(new PrismaPg(pool, { schema: options.schema }))
  // off, the client as generated: no hook on any query
  return tracingEnabled() ? traced(client, options.schema) : client
}

interface QueryHook {
  model?: string
  operation: string
  args: unknown
  query: (args: unknown) => Promise<unknown>
}
interface Extendable {
  $extends(extension: { query: { $allOperations(hook: QueryHook): Promise<unknown> } }): unknown
}

/**
 * A span per Prisma operation, model queries and raw SQL ($queryRaw, $executeRaw) alike:
 * `db.<operation> <model>`, with the model and operation as attributes, never the SQL's
 * values. A client without `$extends` (a stand-in in a test) is left as it is.
 */
function traced<Db extends DatabaseClient>(client: Db, schema: string): Db {
  if (typeof (client as unknown as Partial<Extendable>).$extends !== 'function') return client
  return (client as unknown as Extendable).$extends({
    query: {
      $allOperations: ({ model, operation, args, query }) =>
        inSpan(
          model ? `db.${operation} ${model}` : `db.${operation}`,
          {
            kind: SpanKind.CLIENT,
            attributes: {
              'db.system.name': 'postgresql',
              'db.namespace': schema,
              'db.operation.name': operation,
              ...(model ? { 'db.collection.name': model } : {}),
            },
          },
          () => query(args),
        ),
    },
  }) as Db
}
