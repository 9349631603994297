// `pnpm contracts:snapshot` writes release/contracts.json and release/columns.json for the tree
// as it is (the release's version: package.json's); `pnpm contracts:check` compares the tree
// with them and lists every change a replica of the release would break on, exiting 1.
// The logic: packages/deploy-check/src/release/ (docs/operations.md "Rolling upgrades and compatibility").
import { fileURLToPath } from 'node:url'
import {
  checkAgainstRelease,
  columnsFile,
  contractsFile,
  fleetVersion,
  writeSnapshot,
} from '../packages/deploy-check/src/release/release.ts'

const root = fileURLToPath(new URL('..', import.meta.url))
const command = process.argv[2]

if (command === 'snapshot') {
  await writeSnapshot(root)
  console.log(`wrote ${contractsFile} and ${columnsFile} (release ${fleetVersion(root)})`)
} else if (command === 'check') {
  const { version, problems } = await checkAgainstRelease(root)
  if (problems.length > 0) {
    console.error(
      `contracts:check: ${problems.length} change(s) a replica of release ${version} would break on:\n${problems.map((p) => `  - ${p}`).join('\n')}`,
    )
    process.exit(1)
  }
  console.log(`contracts:check: compatible with release ${version}`)
} else {
  console.error('usage: tsx scripts/contracts.ts snapshot|check')
  process.exit(2)
}
