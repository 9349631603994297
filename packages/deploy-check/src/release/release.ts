/**
 * Releases of the fleet: one version for every package (the root package.json's), the images
 * tagged with it (imageTags.ts), a CHANGELOG.md section per release, and at each release a
 * snapshot of what replicas of it depend on: release/contracts.json (every NATS endpoint,
 * message, stream and HTTP route, with their JSON Schemas) and release/columns.json (every
 * table and column, and the migrations it was cut with). The check compares the tree with that
 * snapshot (compat.ts, database.ts).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'
import { compareContracts } from './compat.ts'
import { readContracts, type ServiceContracts } from './contracts.ts'
import { checkMigrations, readColumns, type ServiceColumns } from './database.ts'
import { setImageTags } from './imageTags.ts'

export interface ContractsSnapshot {
  version: string
  services: Record<string, ServiceContracts>
}

export interface ColumnsSnapshot {
  version: string
  services: Record<string, ServiceColumns>
}

export const contractsFile = 'release/contracts.json'
export const columnsFile = 'release/columns.json'

const readJson = <T>(path: string) => JSON.parse(readFileSync(path, 'utf8')) as T
const writeJson = (path: string, value: unknown) => writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`)

/** The fleet's version: the root package.json's. */
export const fleetVersion = (root: string) => readJson<{ version: string }>(join(root, 'package.json')).version

/** Writes release/contracts.json and release/columns.json for the tree as it is, under the root package.json's version. */
export async function writeSnapshot(root: string): Promise<void> {
  const version = fleetVersion(root)
  const contracts: ContractsSnapshot = { version, services: await readContracts() }
  const columns: ColumnsSnapshot = { version, services: readColumns(root) }
  mkdirSync(join(root, 'release'), { recursive: true })
  writeJson(join(root, contractsFile), contracts)
  writeJson(join(root, columnsFile), columns)
}

/** What a replica of the release would break on, comparing the tree in `root` with its release snapshot. */
export async function checkAgainstRelease(root: string): Promise<{ version: string; problems: string[] }> {
  for (const file of [contractsFile, columnsFile]) {
    if (!existsSync(join(root, file))) throw new Error(`${file} is missing: write it with pnpm contracts:snapshot (pnpm release does)`)
  }
  const released = readJson<ContractsSnapshot>(join(root, contractsFile))
  const columns = readJson<ColumnsSnapshot>(join(root, columnsFile))
  const problems = [...compareContracts(released.services, await readContracts()), ...checkMigrations(root, columns.services)]
  return { version: released.version, problems }
}

/** Every package.json of the workspace (the root's, then each member's of pnpm-workspace.yaml), relative to the root. */
export function packageFiles(root: string): string[] {
  const { packages } = parse(readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8')) as { packages: string[] }
  const dirs = packages.flatMap((glob) => {
    if (!glob.endsWith('/*')) return [glob]
    const parent = glob.slice(0, -2)
    return readdirSync(join(root, parent), { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => `${parent}/${e.name}`)
      .sort()
  })
  return ['package.json', ...dirs.map((dir) => `${dir}/package.json`).filter((file) => existsSync(join(root, file)))]
}

const semver = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/

/**
 * `pnpm release <version>`: every package.json at the version, the images tagged with it, a
 * CHANGELOG.md section to fill in, and the release snapshot. The contract check runs first
 * against the previous release: a release that breaks it is not cut.
 */
export async function cutRelease(root: string, version: string): Promise<string[]> {
  if (!semver.test(version)) throw new Error(`${version} is not a version (MAJOR.MINOR.PATCH)`)
  const previous = fleetVersion(root)
  if (version === previous) throw new Error(`the fleet is already at ${version}`)
  if (existsSync(join(root, contractsFile))) {
    const { problems } = await checkAgainstRelease(root)
    if (problems.length > 0) throw new Error(`the tree breaks release ${previous}:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  }
  const written: string[] = []
  for (const file of packageFiles(root)) {
    const text = readFileSync(join(root, file), 'utf8')
    // the version line only: the rest of each file stays as written
    writeFileSync(join(root, file), text.replace(/^(\s*"version":\s*)"[^"]*"/m, `$1"${version}"`))
    written.push(file)
  }
  written.push(...setImageTags(root, version))
  const changelog = join(root, 'CHANGELOG.md')
  const earlier = existsSync(changelog) ? readFileSync(changelog, 'utf8').replace(/^# Changelog\n+/, '') : ''
  const date = new Date().toISOString().slice(0, 10)
  const heading = `## ${version} (${date})`
  // what was written down as it landed ("## Unreleased") becomes the release's section; else one to fill in
  const next = /^## Unreleased\n/.test(earlier)
    ? earlier.replace(/^## Unreleased\n/, `${heading}\n`)
    : `${heading}\n\n### Added\n\n### Changed\n\n### Removed (deprecated in ${previous} or before)\n\n### Upgrade notes\n\n${earlier}`
  writeFileSync(changelog, `# Changelog\n\n${next}`)
  written.push('CHANGELOG.md')
  await writeSnapshot(root)
  written.push(contractsFile, columnsFile)
  return written
}
