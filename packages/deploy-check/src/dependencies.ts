/** What an image holds: every package a deployable's code reaches at run time is among the production dependencies it is deployed with. */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { dirname, join, relative } from 'node:path'
import type { Component } from './components.ts'

/**
 * An image is `pnpm deploy --prod` of its package (scripts/deploy-package.sh): only the
 * `dependencies` of the package and, inside it, of the workspace packages it depends on. A
 * package the code imports but lists under devDependencies is there in the workspace (tests and
 * `pnpm start` pass) and missing in the image, where the process dies at start with
 * ERR_MODULE_NOT_FOUND. This finds it without building anything: from the deployable's entry
 * (src/server.ts, or src/cli.ts for the devnet) it follows every run-time import (not `import
 * type`) through relative files and into workspace packages (by their package.json "exports"),
 * and each bare import must name a production dependency of the package whose file imports it.
 */
export function checkDependencies(root: string, components: Component[], problems: string[], notes: string[]): void {
  const workspace = workspacePackages(root)
  const seen = new Set<string>()
  const found = new Set<string>()
  for (const c of components) {
    const entry = ['src/server.ts', 'src/cli.ts'].map((f) => join(root, c.dir, f)).find((f) => existsSync(f))
    if (!entry) {
      problems.push(`${c.dir}: no src/server.ts or src/cli.ts to start the import walk from`)
      continue
    }
    const queue: { file: string; pkg: Package }[] = [{ file: entry, pkg: workspace.get(c.packageName)! }]
    while (queue.length > 0) {
      const { file, pkg } = queue.shift()!
      if (seen.has(file)) continue
      seen.add(file)
      for (const specifier of runtimeImports(readFileSync(file, 'utf8'))) {
        if (specifier.startsWith('.')) {
          queue.push({ file: join(dirname(file), specifier), pkg })
          continue
        }
        if (specifier.startsWith('node:') || builtins.has(specifier)) continue
        const parts = specifier.split('/')
        const name = specifier.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!
        const subpath = `.${specifier.slice(name.length)}`
        if (name !== pkg.name && !pkg.production.has(name)) {
          const problem = `${relative(root, file)}: imports ${name}, which ${pkg.name} does not list in "dependencies" (its image, pnpm deploy --prod, would not hold it)`
          if (!found.has(problem)) problems.push(problem)
          found.add(problem)
        }
        const target = workspace.get(name)
        const source = target?.exports[subpath]
        if (target && source) queue.push({ file: join(root, target.dir, source), pkg: target })
      }
    }
  }
  notes.push(`dependencies: ${seen.size} files reached from ${components.length} entry points import only production dependencies`)
}

interface Package {
  name: string
  dir: string
  production: Set<string>
  /** subpath ('.', './testing') -> the TypeScript source it resolves to without the ats-dist condition */
  exports: Record<string, string>
}

/** every package under gateway/, services/ and packages/, by name */
function workspacePackages(root: string): Map<string, Package> {
  const found = new Map<string, Package>()
  const add = (dir: string) => {
    const file = join(root, dir, 'package.json')
    if (!existsSync(file)) return
    const manifest = JSON.parse(readFileSync(file, 'utf8')) as {
      name: string
      dependencies?: Record<string, string>
      exports?: Record<string, string | { default?: string }>
    }
    const exports: Record<string, string> = {}
    for (const [subpath, target] of Object.entries(manifest.exports ?? {})) {
      const source = typeof target === 'string' ? target : target.default
      if (source) exports[subpath] = source
    }
    found.set(manifest.name, { name: manifest.name, dir, production: new Set(Object.keys(manifest.dependencies ?? {})), exports })
  }
  add('gateway')
  for (const parent of ['services', 'packages']) {
    for (const entry of readdirSync(join(root, parent), { withFileTypes: true })) if (entry.isDirectory()) add(`${parent}/${entry.name}`)
  }
  return found
}

const builtins = new Set(builtinModules)
// `import … from '…'`, `export … from '…'` (not `import type`/`export type`), `import '…'`, `import('…')`
const importPattern =
  /^\s*(?:import|export)\s+(?!type\s)[^'";]*?\sfrom\s+['"]([^'"]+)['"]|^\s*import\s+['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/gm

function runtimeImports(text: string): string[] {
  return [...text.matchAll(importPattern)].map((m) => m[1] ?? m[2] ?? m[3]!)
}
