import { readdir } from 'node:fs/promises'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { join } from 'node:path'
import type { ServiceDefinition } from '@ats/service-kit'

export const root = fileURLToPath(new URL('..', import.meta.url))

export interface FleetMember {
  name: string
  dir: string
  definition: ServiceDefinition<any, any>
}

/** Every service under services/ (those with src/service.ts), then the gateway. */
export async function fleetMembers(): Promise<FleetMember[]> {
  const dirs = (await readdir(join(root, 'services'), { withFileTypes: true })).filter((d) => d.isDirectory())
  const members: FleetMember[] = []
  for (const dir of [...dirs.map((d) => join(root, 'services', d.name)), join(root, 'gateway')]) {
    const module = (await import(pathToFileURL(join(dir, 'src', 'service.ts')).href)) as Record<string, unknown>
    const definition = Object.values(module).find(
      (v): v is ServiceDefinition<any, any> => typeof v === 'object' && v !== null && 'register' in v && 'name' in v,
    )
    if (definition) members.push({ name: definition.name, dir, definition })
  }
  return members
}
