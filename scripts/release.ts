// `pnpm release <version>`: cuts a release of the fleet: checks the tree against the previous
// release, sets every package.json and the images' tags to the version, adds a CHANGELOG.md
// section to fill in, and writes the release snapshot (release/). Commit what it lists, then tag.
import { fileURLToPath } from 'node:url'
import { cutRelease } from '../packages/deploy-check/src/release/release.ts'

const version = process.argv[2]
if (!version) {
  console.error('usage: pnpm release <version>   (e.g. pnpm release 1.1.0)')
  process.exit(2)
}
try {
  const written = await cutRelease(fileURLToPath(new URL('..', import.meta.url)), version)
  console.log(`release ${version}: wrote\n${written.map((f) => `  ${f}`).join('\n')}\nfill in CHANGELOG.md, commit, and tag v${version}`)
} catch (error) {
  console.error((error as Error).message)
  process.exit(1)
}
