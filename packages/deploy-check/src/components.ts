/** The deployables the checks hold the files to, and the settings each reads: from the code (@ats/fleet). */
import { readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fleetMembers } from '@ats/fleet'
import { settingsOf } from '@ats/service-kit'
import type { Obj } from './objects.ts'

export interface Component {
  /** the fleet member: gateway, agent, trading, ... */
  name: string
  packageName: string
  /** the package directory, relative to the repository root */
  dir: string
  settings: Record<string, { secret: boolean; optional: boolean; schema: any }>
}

/** The fleet (from the code) plus the devnet, which only compose runs. */
export async function deployables(repoRoot: string): Promise<{ fleet: Component[]; devnet: Component }> {
  const fleet = (await fleetMembers()).map((m) => {
    const settings = Object.fromEntries(
      Object.entries(settingsOf(m.definition) as Obj).map(([k, v]) => [
        k,
        { secret: v.secret === true, optional: v['~optional'] === true, schema: v },
      ]),
    )
    const dir = relative(repoRoot, m.dir)
    return { name: m.name, dir, packageName: JSON.parse(readFileSync(join(m.dir, 'package.json'), 'utf8')).name as string, settings }
  })
  return { fleet, devnet: { name: 'devnet', dir: 'packages/devnet', packageName: '@ats/devnet', settings: {} } }
}
