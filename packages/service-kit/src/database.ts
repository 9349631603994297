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
  return options.client(new PrismaPg({ connectionString: url }, { schema: options.schema }))
}
