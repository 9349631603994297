/**
 * pnpm validate:deploy [k8s dir…]: the offline checks of src/validate.ts over the repository,
 * rendering the k8s/ directories named (k8s/base, k8s/overlays/prod, …; default: base and every
 * overlay). Prints what was checked, or every problem found and exits 1.
 */
import { fileURLToPath } from 'node:url'
import { checkDeployment } from './validate.ts'

const repo = fileURLToPath(new URL('../../..', import.meta.url))
// DEPLOY_CHECK_ROOT: check a copy of the files (the tests break one on purpose)
const root = process.env.DEPLOY_CHECK_ROOT || repo
const started = Date.now()
const k8s = process.argv.slice(2).map((dir) => dir.replace(/\/+$/, ''))
const { problems, notes } = await checkDeployment(root, repo, k8s.length > 0 ? { k8s } : {})
if (problems.length > 0) {
  process.stderr.write(`validate-deploy: ${problems.length} problem(s)\n${problems.map((p) => `  - ${p}`).join('\n')}\n`)
  process.exit(1)
}
process.stdout.write(`validate-deploy: ok in ${((Date.now() - started) / 1000).toFixed(1)} s\n${notes.map((n) => `  ${n}`).join('\n')}\n`)
