import { PrismaPg } from '@prisma/adapter-pg'

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
  return options.client(new PrismaPg(pool, { schema: options.schema }))
}
