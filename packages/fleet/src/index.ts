import { readdir } from 'node:fs/promises'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { join } from 'node:path'
import { settingsOf, type AnyServiceDefinition } from '@ats/service-kit'

/**
 * Fleet membership: which deployables exist and how `pnpm start` runs each. Shared by scripts/
 * and packages/deploy-check; no service imports it (it loads every service).
 */

/** The repository root, from src/index.ts and from dist/index.js alike (both two levels down). */
export const root = fileURLToPath(new URL('../../..', import.meta.url))

export interface FleetMember {
  name: string
  dir: string
  definition: AnyServiceDefinition
}

/** A member's src/service.ts; where no TypeScript loader runs (the compiled tests), its dist/service.js. */
async function loadService(dir: string): Promise<Record<string, unknown>> {
  try {
    return (await import(pathToFileURL(join(dir, 'src', 'service.ts')).href)) as Record<string, unknown>
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_UNKNOWN_FILE_EXTENSION') throw error
    return (await import(pathToFileURL(join(dir, 'dist', 'service.js')).href)) as Record<string, unknown>
  }
}

/** Every service under services/ (those with src/service.ts), then the gateway. */
export async function fleetMembers(): Promise<FleetMember[]> {
  const dirs = (await readdir(join(root, 'services'), { withFileTypes: true })).filter((d) => d.isDirectory())
  const members: FleetMember[] = []
  for (const dir of [...dirs.map((d) => join(root, 'services', d.name)), join(root, 'gateway')]) {
    const module = await loadService(dir)
    const definition = Object.values(module).find(
      (v): v is AnyServiceDefinition => typeof v === 'object' && v !== null && 'register' in v && 'name' in v,
    )
    if (definition) members.push({ name: definition.name, dir, definition })
  }
  return members
}

/** A setting as a member declares it: its schema (type, default, description), and whether it is secret or may be unset. */
export interface DeclaredSetting {
  secret: boolean
  optional: boolean
  schema: Record<string, any>
}

/**
 * Every setting a member reads, as declared: the one reader of the declarations for what is
 * checked against them (deploy-check's ConfigMaps and Secrets) and what is written from them
 * (docs/settings.md).
 */
export function declaredSettings(member: FleetMember): Record<string, DeclaredSetting> {
  return Object.fromEntries(
    Object.entries(settingsOf(member.definition)).map(([name, value]) => {
      const schema = value as unknown as Record<string, any>
      return [name, { secret: schema.secret === true, optional: schema['~optional'] === true, schema }]
    }),
  )
}

/**
 * What `pnpm start` runs a member with: services on 127.0.0.1 at their own ports; the gateway on
 * HOST (0.0.0.0 unless set) at PORT, and its operations port (/ready, /metrics) on OPS_HOST,
 * 127.0.0.1 unless set (a developer's machine need not offer them on every interface). Compose and k8s leave
 * OPS_HOST unset, so there it follows HOST and their probes reach it.
 */
export function memberEnv(
  member: FleetMember,
  base: NodeJS.ProcessEnv,
  settings: NodeJS.ProcessEnv,
): { env: NodeJS.ProcessEnv; port: number; opsPort: number } {
  if (member.name !== 'gateway') {
    const port = member.definition.port as number
    return { env: { ...base, PORT: String(port), HOST: '127.0.0.1' }, port, opsPort: port }
  }
  const port = Number(settings.PORT || member.definition.port)
  // the gateway answers /ready on its operations port only
  const opsPort = Number(settings.OPS_PORT || port + 6000)
  const env = {
    ...base,
    PORT: String(port),
    HOST: settings.HOST || '0.0.0.0',
    OPS_PORT: String(opsPort),
    OPS_HOST: settings.OPS_HOST || '127.0.0.1',
  }
  return { env, port, opsPort }
}
