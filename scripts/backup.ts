import { resolve } from 'node:path'
import { backup, restore } from '@ats/fleet/backup'
import { databaseSettings, loadConfig, safeUrl, StartupError } from '@ats/service-kit'

/**
 * pnpm db:backup <dir>: every service schema of DATABASE_URL, in one snapshot, into <dir>.
 * pnpm db:restore <dir> [service ...]: that backup into DATABASE_URL, which must not have those
 * schemas yet (all of them, or the named services'); then start the fleet on it.
 */
const [command, dir, ...services] = process.argv.slice(2)
try {
  if ((command !== 'backup' && command !== 'restore') || !dir) {
    throw new StartupError('usage: pnpm db:backup <dir> | pnpm db:restore <dir> [service ...] (DATABASE_URL names the database)')
  }
  const { DATABASE_URL } = loadConfig(databaseSettings)
  const path = resolve(process.cwd(), dir)
  if (command === 'backup') {
    const manifest = await backup(DATABASE_URL, path)
    for (const s of manifest.schemas) console.log(`${s.service}: schema ${s.schema}, ${s.migrations.length} migrations applied`)
    console.log(`backed up ${safeUrl(DATABASE_URL)} into ${path}/${manifest.file} (${manifest.bytes} bytes) at ${manifest.takenAt}`)
  } else {
    const restored = await restore(path, DATABASE_URL, services.length > 0 ? services : undefined)
    console.log(`restored ${restored.map((s) => `${s.service} (${s.schema})`).join(', ')} into ${safeUrl(DATABASE_URL)}`)
  }
} catch (error) {
  console.error(error instanceof StartupError ? error.message : `db:${command ?? '?'}: ${(error as Error).message}`)
  process.exit(1)
}
