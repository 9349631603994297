/** The deployables the checks hold the files to, and the settings each reads: from the code (@ats/fleet). */
import { readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { declaredSettings, fleetMembers, type DeclaredSetting } from '@ats/fleet'

export interface Component {
  /** the fleet member: gateway, agent, trading, ... */
  name: string
  packageName: string
  /** the package directory, relative to the repository root */
  dir: string
  settings: Record<string, DeclaredSetting>
}

/** The fleet (from the code) plus the devnet, which only compose runs. */
export async function deployables(repoRoot: string): Promise<{ fleet: Component[]; devnet: Component }> {
  const fleet = (await fleetMembers()).map((m) => {
    const settings = declaredSettings(m)
    const dir = relative(repoRoot, m.dir)
    return { name: m.name, dir, packageName: JSON.parse(readFileSync(join(m.dir, 'package.json'), 'utf8')).name as string, settings }
  })
  return { fleet, devnet: { name: 'devnet', dir: 'packages/devnet', packageName: '@ats/devnet', settings: {} } }
}
