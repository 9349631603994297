import { spawn, spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { compileTests, walk } from './compileTests.ts'

/**
 * pnpm test: every test file of every workspace package, against real Postgres, NATS, Redis and
 * anvil. A tap test file is a program that prints TAP and exits non-zero when a test fails, so
 * this runs each one as its own `node` process, TEST_JOBS (3) at a time across all packages, the
 * longest first (by the times of the last run on this machine), each with its package's tap timeout.
 *
 * What it runs is JavaScript, with no loader hook: `pnpm build` writes every package's dist/, and
 * scripts/compileTests.ts compiles the test files next to their source, their imports of `src/`
 * pointed at `dist/`. Under tap's runner every module load of every test process went through two
 * off-thread loader hooks on Node 20 (tsx's and tap's processinfo): 3-8 s of CPU per process, a
 * third of the suite.
 *
 * A passing file prints one line, a failing one its whole output; every file runs even when one
 * fails, and the end lists each package's time, CPU seconds and outcome. `pnpm test <dir>…` runs only those
 * packages. TEST_FROM_SOURCE=1 runs each package's own `pnpm test` (tap, from source, one package
 * after another) instead. Inside a package, `pnpm test` is tap on the source, for development.
 */
const root = join(import.meta.dirname, '..')
/**
 * Each file's time in the last run, in the temporary directory rather than the checkout: a fresh
 * clone (CI) orders its files by the times of the runs before it on this machine (of other
 * checkouts too: a file's time changes little from one commit to the next). Without them it
 * would go by file size, which can start a long file last and leave the other jobs idle at the end.
 */
const timingsFile = join(tmpdir(), 'ats-test-times.json')

interface Package {
  dir: string
  timeoutSeconds: number
  files: string[]
}

function packagesWithTests(): Package[] {
  const dirs = [
    'gateway',
    'e2e',
    ...['services', 'packages'].flatMap((group) => readdirSync(join(root, group)).map((name) => `${group}/${name}`)),
  ]
  return dirs.flatMap((dir) => {
    const manifest = join(root, dir, 'package.json')
    if (!existsSync(manifest)) return []
    const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as { scripts?: Record<string, string>; tap?: { timeout?: number } }
    if (!pkg.scripts?.test) return []
    const files = walk(join(root, dir, 'test'))
      .filter((file) => file.endsWith('.test.ts'))
      .map((file) => relative(join(root, dir), file))
    return [{ dir, timeoutSeconds: pkg.tap?.timeout ?? 30, files: files.sort() }]
  })
}

interface Outcome {
  file: string
  code: number
  seconds: number
  /** CPU seconds of the file's process and the processes it waited for (anvil, nats-server); undefined off Linux */
  cpu?: number
  assertions: { total: number; pass: number; fail: number }
  output: string
}

/**
 * CPU seconds of every child this process has reaped so far (user and system, from /proc: a
 * child's counts arrive when it is reaped, its own reaped children's included). The difference
 * across a file's exit is that file's CPU; undefined where there is no /proc.
 */
function reapedChildrenCpu(): number | undefined {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8')
    // fields after the command's closing parenthesis start at the third: cutime and cstime are the
    // 16th and 17th, in clock ticks (100 a second on Linux)
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[13]) + Number(fields[14])) / 100
  } catch {
    return undefined
  }
}

let lastReapedCpu = reapedChildrenCpu()

function run(pkg: Package, file: string, env: NodeJS.ProcessEnv): Promise<Outcome> {
  const started = Date.now()
  const chunks: Buffer[] = []
  return new Promise((resolve) => {
    // TAP_TIMEOUT: tap's own timeout for the file, which fails it with the test that hung named
    const childEnv = { ...env, TAP_TIMEOUT: String(pkg.timeoutSeconds) }
    const child = spawn(process.execPath, [file.replace(/\.ts$/, '.js')], {
      cwd: join(root, pkg.dir),
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk))
    child.stderr.on('data', (chunk: Buffer) => chunks.push(chunk))
    // and a last resort, for a process that does not exit after tap's timeout
    let timedOut = false
    const timer = setTimeout(
      () => {
        timedOut = true
        child.kill('SIGTERM')
        setTimeout(() => child.kill('SIGKILL'), 5_000).unref()
      },
      (pkg.timeoutSeconds + 30) * 1000,
    )
    // read at exit: what was added since the last exit is this file's (two files reaped in the same
    // instant would show as one)
    let cpu: number | undefined
    child.on('exit', () => {
      const now = reapedChildrenCpu()
      if (now !== undefined && lastReapedCpu !== undefined) cpu = now - lastReapedCpu
      lastReapedCpu = now
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      let output = Buffer.concat(chunks).toString()
      if (timedOut)
        output += `\n# ${file} did not exit within its package's tap timeout (${pkg.timeoutSeconds} s) and 30 s more, and was stopped\n`
      // the file's own summary line, `# { total: 17, pass: 16, fail: 1 }`; a file that dies early has none
      const summary = /^# \{ total: (\d+)(?:, pass: (\d+))?(?:, fail: (\d+))?/m.exec(output)
      const assertions = { total: Number(summary?.[1] ?? 0), pass: Number(summary?.[2] ?? 0), fail: Number(summary?.[3] ?? 0) }
      const failed = code !== 0 || signal !== null || timedOut || !summary
      resolve({ file: `${pkg.dir}/${file}`, code: failed ? 1 : 0, seconds: (Date.now() - started) / 1000, cpu, assertions, output })
    })
  })
}

/**
 * `pnpm build` (every package's dist/, which tests import through node's `ats-dist` condition, as
 * the images run it), then the test files compiled. Returns the environment test processes get.
 */
async function prepare(packages: Package[]): Promise<NodeJS.ProcessEnv> {
  let started = Date.now()
  const build = spawnSync('pnpm', ['build'], { cwd: root, encoding: 'utf8' })
  if (build.status !== 0) {
    process.stdout.write(
      `${build.stdout}${build.stderr}\npnpm build failed: the tests load the compiled packages (TEST_FROM_SOURCE=1 loads the source)\n`,
    )
    process.exit(1)
  }
  process.stdout.write(`== pnpm build (${Math.round((Date.now() - started) / 1000)} s): the tests load the other packages from dist/\n`)
  started = Date.now()
  const compiled = await compileTests(packages.map((pkg) => join(root, pkg.dir, 'test')))
  process.stdout.write(`== ${compiled.files} test files compiled to JavaScript next to their source (${compiled.ms} ms)\n`)
  // DEPLOY_PACKAGE_BUILT: packages/deploy-check's image test builds no second time
  return { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --conditions=ats-dist`.trim(), DEPLOY_PACKAGE_BUILT: '1' }
}

/** The old way: each package's tap, from source, one package after another. */
function runFromSource(packages: Package[]): never {
  let failed = 0
  for (const pkg of packages) {
    const started = Date.now()
    const result = spawnSync('pnpm', ['test'], { cwd: join(root, pkg.dir), stdio: 'inherit' })
    process.stdout.write(`== ${pkg.dir}: ${result.status === 0 ? 'ok' : 'FAIL'} (${Math.round((Date.now() - started) / 1000)} s)\n`)
    if (result.status !== 0) failed++
  }
  process.exit(failed > 0 ? 1 : 0)
}

function readTimings(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(timingsFile, 'utf8')) as Record<string, number>
  } catch {
    return {}
  }
}

const all = packagesWithTests()
const only = process.argv.slice(2).map((dir) => dir.replace(/\/$/, ''))
const unknown = only.filter((dir) => !all.some((pkg) => pkg.dir === dir))
if (unknown.length > 0) {
  process.stderr.write(`no tests in ${unknown.join(', ')}; packages with tests: ${all.map((pkg) => pkg.dir).join(', ')}\n`)
  process.exit(2)
}
const packages = only.length > 0 ? all.filter((pkg) => only.includes(pkg.dir)) : all
if (process.env.TEST_FROM_SOURCE === '1') runFromSource(packages)

const env = await prepare(packages)
// the build's processes are not a test file's
lastReapedCpu = reapedChildrenCpu()
const jobs = Math.max(1, Number.parseInt(process.env.TEST_JOBS ?? '3', 10) || 3)
/**
 * A test file's size in kB with the modules of its own folder (`x.test.ts` runs `x/*.ts` in its
 * process): about its seconds, when no run has timed it or it has grown since.
 */
function sizeOf(pkg: Package, file: string): number {
  const path = join(root, pkg.dir, file)
  const modules = walk(path.replace(/\.test\.ts$/, '')).filter((module) => module.endsWith('.ts'))
  return [path, ...modules].reduce((bytes, module) => bytes + statSync(module).size, 0) / 1000
}
// the longest first, so the last to finish are short: the last run's times, or the size when that is more
const timings = readTimings()
const expected = (pkg: Package, file: string) => Math.max(timings[`${pkg.dir}/${file}`] ?? 0, sizeOf(pkg, file))
const queue = packages
  .flatMap((pkg) => pkg.files.map((file) => ({ pkg, file })))
  .sort((a, b) => expected(b.pkg, b.file) - expected(a.pkg, a.file))
const total = queue.length
const outcomes: Outcome[] = []
const started = Date.now()
process.stdout.write(`== ${total} test files in ${packages.length} packages, ${jobs} at a time\n`)
await Promise.all(
  Array.from({ length: Math.min(jobs, queue.length) }, async () => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      const outcome = await run(next.pkg, next.file, env)
      outcomes.push(outcome)
      const { pass, total: asserted } = outcome.assertions
      const cpu = outcome.cpu === undefined ? '' : `, ${outcome.cpu.toFixed(1)} s CPU`
      const line = `${outcome.code === 0 ? 'ok  ' : 'FAIL'} ${outcome.file} (${outcome.seconds.toFixed(1)} s${cpu}, ${pass}/${asserted} assertions) [${outcomes.length}/${total}]\n`
      process.stdout.write(outcome.code === 0 ? line : `\n${outcome.output}\n${line}\n`)
    }
  }),
)

// written aside and renamed: a run starting meanwhile (another checkout) never reads half a file
const latest = { ...readTimings(), ...Object.fromEntries(outcomes.map((o) => [o.file, o.seconds])) }
writeFileSync(`${timingsFile}.${process.pid}`, JSON.stringify(latest))
renameSync(`${timingsFile}.${process.pid}`, timingsFile)

const failed = outcomes.filter((o) => o.code !== 0)
const cpuOf = (files: Outcome[]) =>
  files.every((o) => o.cpu !== undefined) ? `, ${Math.round(files.reduce((n, o) => n + (o.cpu ?? 0), 0))} s CPU` : ''
const count = (files: Outcome[], key: 'total' | 'pass' | 'fail') => files.reduce((n, o) => n + o.assertions[key], 0)
process.stdout.write(`\n== test summary (${Math.round((Date.now() - started) / 1000)} s, ${jobs} files at a time)\n`)
for (const pkg of packages) {
  const mine = outcomes.filter((o) => o.file.startsWith(`${pkg.dir}/`))
  const bad = mine.filter((o) => o.code !== 0)
  const seconds = Math.round(mine.reduce((n, o) => n + o.seconds, 0))
  process.stdout.write(
    `${bad.length === 0 ? 'ok  ' : 'FAIL'} ${pkg.dir}: ${mine.length} files, ${seconds} s of file time${cpuOf(mine)}, ${count(mine, 'pass')}/${count(mine, 'total')} assertions\n`,
  )
}
process.stdout.write(
  `all: ${outcomes.length} files, ${Math.round(outcomes.reduce((n, o) => n + o.seconds, 0))} s of file time${cpuOf(outcomes)}\n`,
)
for (const o of failed) process.stdout.write(`FAIL ${o.file}\n`)
// the last line, tap's summary shape: .ci/run reads it
process.stdout.write(`# { total: ${count(outcomes, 'total')}, pass: ${count(outcomes, 'pass')}, fail: ${count(outcomes, 'fail')} }\n`)
process.exit(failed.length > 0 ? 1 : 0)
