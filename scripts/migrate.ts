import { databaseSettings, loadConfig, migrate, safeUrl, StartupError } from '@ats/service-kit'
import { fleetMembers } from '@ats/fleet'

/** pnpm db:migrate: applies every service's migrations to DATABASE_URL (services also do this at start). */
try {
  const { DATABASE_URL } = loadConfig(databaseSettings)
  for (const member of await fleetMembers()) {
    const database = member.definition.database
    if (!database) continue
    const result = await migrate(DATABASE_URL, { schema: database.schema, dir: database.migrations })
    const applied = result.applied.length > 0 ? `applied ${result.applied.join(', ')}` : 'up to date'
    console.log(`${member.name} (schema ${database.schema} on ${safeUrl(DATABASE_URL)}): ${applied}`)
  }
} catch (error) {
  console.error(error instanceof StartupError ? error.message : error)
  process.exit(1)
}
