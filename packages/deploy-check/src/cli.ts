/**
 * pnpm validate:deploy: the offline checks of src/validate.ts over the repository. Prints
 * what was checked, or every problem found and exits 1.
 */
import { fileURLToPath } from 'node:url'
import { checkDeployment } from './validate.ts'

const repo = fileURLToPath(new URL('../../..', import.meta.url))
// DEPLOY_CHECK_ROOT: check a copy of the files (the tests break one on purpose)
const root = process.env.DEPLOY_CHECK_ROOT || repo
const started = Date.now()
const { problems, notes } = await checkDeployment(root, repo)
if (problems.length > 0) {
  process.stderr.write(`validate-deploy: ${problems.length} problem(s)\n${problems.map((p) => `  - ${p}`).join('\n')}\n`)
  process.exit(1)
}
process.stdout.write(`validate-deploy: ok in ${((Date.now() - started) / 1000).toFixed(1)} s\n${notes.map((n) => `  ${n}`).join('\n')}\n`)
