import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { build, type Plugin } from 'esbuild'

/**
 * Compiles test files to JavaScript next to their source (`test/x.test.ts` -> `test/x.test.js`,
 * gitignored), for `pnpm test`: node then runs a test file with no loader hook at all. An import
 * of a package's own `src/` is pointed at its `dist/` (what `pnpm build` wrote), so a test and the
 * packages it imports by name share one copy of each module, as in an image. Type checking is
 * `pnpm typecheck`'s job; this only strips types (esbuild, well under a second for the tree).
 */

/** the first line of every file written here: how stale ones are found and removed */
export const COMPILED_BANNER = '// compiled from TypeScript by scripts/compileTests.ts for pnpm test: not source, not committed'

const root = join(import.meta.dirname, '..')

/** Every file under `dir` (none when it is missing), skipping node_modules and dot-folders. */
export function walk(dir: string, found: string[] = []): string[] {
  if (!existsSync(dir)) return found
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue
    const path = join(dir, entry.name)
    if (entry.isDirectory()) walk(path, found)
    else found.push(path)
  }
  return found
}

function packageRoot(file: string): string {
  for (let dir = dirname(file); dir !== dirname(dir); dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir
  }
  return root
}

const toJs = (path: string) => path.replace(/\.ts$/, '.js').replace(/\.mts$/, '.mjs')

/** what the last run wrote outside the test folders (removed with the rest at the next run) */
const manifest = join(root, 'node_modules', '.cache', 'ats-compiled-tests.json')

/** Removes what an earlier run compiled (a test since deleted must not linger). */
function removeCompiled(dirs: string[]): void {
  let elsewhere: string[] = []
  try {
    elsewhere = JSON.parse(readFileSync(manifest, 'utf8')) as string[]
  } catch {
    // first run
  }
  for (const file of [...dirs.flatMap((dir) => walk(dir)), ...elsewhere]) {
    if (/\.m?js$/.test(file) && existsSync(file) && readFileSync(file, 'utf8').startsWith(COMPILED_BANNER)) rmSync(file)
  }
}

/**
 * Compiles every `.ts` file under the given test folders, each next to its source. An import of
 * a `src/` file becomes an import of its compiled twin in that package's `dist/`; any other
 * TypeScript a test imports by a relative path (the `src/` of a package
 * without a build) is compiled next to its source too.
 */
export async function compileTests(testDirs: string[]): Promise<{ files: number; ms: number }> {
  const started = performance.now()
  removeCompiled(testDirs)
  const entries = new Set(testDirs.flatMap((dir) => walk(dir)).filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts')))
  const outsideSrc = new Set<string>()
  const relativeImports: Plugin = {
    name: 'relative-imports',
    setup(b) {
      b.onResolve({ filter: /^\.\.?\// }, ({ path, resolveDir, importer }) => {
        const target = resolve(resolveDir, path)
        if (!/\.m?ts$/.test(target)) return { path, external: true }
        const pkg = packageRoot(target)
        const inSrc = relative(join(pkg, 'src'), target)
        let compiled: string
        if (!inSrc.startsWith('..') && existsSync(join(pkg, 'dist'))) {
          compiled = join(pkg, 'dist', toJs(inSrc))
        } else {
          compiled = toJs(target)
          if (!entries.has(target)) outsideSrc.add(target)
        }
        let specifier = relative(dirname(importer), compiled)
        if (!specifier.startsWith('.')) specifier = `./${specifier}`
        return { path: specifier, external: true }
      })
    },
  }
  const compile = (files: string[]) =>
    build({
      entryPoints: files,
      outdir: root,
      outbase: root,
      bundle: true,
      packages: 'external',
      platform: 'node',
      format: 'esm',
      target: 'node20',
      banner: { js: COMPILED_BANNER },
      plugins: [relativeImports],
      logLevel: 'error',
    })
  await compile([...entries])
  // TypeScript outside the test folders that a test imports (not in a src/ with a dist/): compiled too
  for (let pending = [...outsideSrc]; pending.length > 0; pending = [...outsideSrc].filter((file) => !entries.has(file))) {
    for (const file of pending) entries.add(file)
    await compile(pending)
  }
  mkdirSync(dirname(manifest), { recursive: true })
  writeFileSync(manifest, JSON.stringify([...outsideSrc].map(toJs)))
  return { files: entries.size, ms: Math.round(performance.now() - started) }
}
