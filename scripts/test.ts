import { spawn, spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'

/**
 * pnpm test: every workspace package's tests, the longest first, TEST_CONCURRENCY packages at a
 * time (1 by default: on 2 cores the tests are CPU-bound, and two packages at once, each with
 * tap's two jobs, took longer than one after another). Each package's output is printed whole
 * when it ends (never interleaved), every package runs even when one fails, and the end lists
 * each package's time and outcome. `pnpm test <dir>…` runs only those packages.
 */
const root = join(import.meta.dirname, '..')

/** the slowest first (seconds seen on a 2-core machine); unknown packages go last */
const expectedSeconds: Record<string, number> = {
  e2e: 200,
  'services/agent': 150,
  gateway: 120,
  'services/admin': 90,
  'packages/deploy-check': 60,
  'services/trading': 60,
  'services/automation': 50,
  'services/market-data': 40,
  'packages/service-kit': 30,
  'packages/devnet': 20,
  'packages/chain': 10,
  'packages/contracts': 5,
}

function packagesWithTests(): string[] {
  const dirs = ['gateway', 'e2e', ...['services', 'packages'].flatMap((group) => readdirSync(join(root, group)).map((name) => `${group}/${name}`))]
  return dirs.filter((dir) => {
    const manifest = join(root, dir, 'package.json')
    return existsSync(manifest) && Boolean(JSON.parse(readFileSync(manifest, 'utf8')).scripts?.test)
  })
}

interface Outcome {
  dir: string
  code: number
  seconds: number
}

function run(dir: string, env: NodeJS.ProcessEnv): Promise<Outcome> {
  const started = Date.now()
  const chunks: Buffer[] = []
  return new Promise((resolve) => {
    const child = spawn('pnpm', ['test'], { cwd: join(root, dir), env, stdio: ['ignore', 'pipe', 'pipe'] })
    child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk))
    child.stderr.on('data', (chunk: Buffer) => chunks.push(chunk))
    child.on('close', (code, signal) => {
      const seconds = Math.round((Date.now() - started) / 1000)
      process.stdout.write(`\n== ${dir} (${seconds} s)\n`)
      process.stdout.write(Buffer.concat(chunks))
      resolve({ dir, code: code ?? (signal ? 1 : 0), seconds })
    })
  })
}

/**
 * The tests load the other packages compiled (`pnpm build` first, then node's `ats-dist`
 * condition, as the images do): each test process then transpiles only its own package's
 * TypeScript, not every package it imports; on 2 cores that took a quarter off an e2e
 * file's CPU time. TEST_FROM_SOURCE=1 skips the build and loads every package's source.
 */
function buildFirst(): NodeJS.ProcessEnv {
  if (process.env.TEST_FROM_SOURCE === '1') return process.env
  const started = Date.now()
  const build = spawnSync('pnpm', ['build'], { cwd: root, encoding: 'utf8' })
  if (build.status !== 0) {
    process.stdout.write(`${build.stdout}${build.stderr}\npnpm build failed: the tests load the compiled packages (TEST_FROM_SOURCE=1 loads the source)\n`)
    process.exit(1)
  }
  process.stdout.write(`== pnpm build (${Math.round((Date.now() - started) / 1000)} s): the tests load the other packages from dist/\n`)
  // DEPLOY_PACKAGE_BUILT: packages/deploy-check's image test builds no second time
  return { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --conditions=ats-dist`.trim(), DEPLOY_PACKAGE_BUILT: '1' }
}

const only = process.argv.slice(2)
const all = packagesWithTests()
const unknown = only.filter((dir) => !all.includes(dir))
if (unknown.length > 0) {
  process.stderr.write(`no tests in ${unknown.join(', ')}; packages with tests: ${all.join(', ')}\n`)
  process.exit(2)
}
const queue = (only.length > 0 ? only : all).sort((a, b) => (expectedSeconds[b] ?? 0) - (expectedSeconds[a] ?? 0))
const concurrency = Math.max(1, Number.parseInt(process.env.TEST_CONCURRENCY ?? '1', 10) || 1)
const env = buildFirst()
const outcomes: Outcome[] = []
const started = Date.now()
await Promise.all(
  Array.from({ length: Math.min(concurrency, queue.length) }, async () => {
    for (let dir = queue.shift(); dir !== undefined; dir = queue.shift()) outcomes.push(await run(dir, env))
  }),
)
const failed = outcomes.filter((o) => o.code !== 0)
process.stdout.write(`\n== test summary (${Math.round((Date.now() - started) / 1000)} s, ${concurrency} at a time)\n`)
for (const o of outcomes) process.stdout.write(`${o.code === 0 ? 'ok  ' : 'FAIL'} ${o.dir} (${o.seconds} s)\n`)
process.exit(failed.length > 0 ? 1 : 0)
