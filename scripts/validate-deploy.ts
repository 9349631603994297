/**
 * Offline checks of the deployment files (no cluster, no Docker engine):
 *
 *  - every YAML document listed by k8s/base/kustomization.yaml parses and
 *    validates against its Kubernetes schema (kubernetes-models);
 *  - no Secret is listed there (secrets ship only as secret.example.yaml, which
 *    is validated too), and every Secret / ConfigMap key a Deployment reads exists
 *    in secret.example.yaml / the listed ConfigMaps;
 *  - every Deployment's containers have a readiness probe on /ready and a
 *    liveness probe on /health;
 *  - docker-compose.yml and the k8s base both run the gateway and every service
 *    under services/.
 *
 *   pnpm validate:deploy   (= tsx scripts/validate-deploy.ts)
 *
 * Exits 1 listing every problem found. Note: kubernetes-models checks types,
 * required fields and formats, but not unknown (e.g. misspelt) field names.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parse, parseAllDocuments } from 'yaml'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const kustomizationPath = join(root, 'k8s/base/kustomization.yaml')
const secretExamplePath = join(root, 'k8s/base/secret.example.yaml')
const composePath = join(root, 'docker-compose.yml')

type Obj = Record<string, unknown>
interface Manifest {
  file: string
  index: number
  doc: Obj
}

const problems: string[] = []
const problem = (message: string) => problems.push(message)
const rel = (path: string) => relative(root, path)
const isObj = (value: unknown): value is Obj => typeof value === 'object' && value !== null && !Array.isArray(value)
const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : [])
const describe = (m: Manifest) =>
  `${rel(m.file)} (document ${m.index + 1}, ${String(m.doc.kind)} ${String((m.doc.metadata as Obj | undefined)?.name ?? '?')})`

/** The YAML documents of a file; a syntax error is a problem, not a crash. */
function loadDocuments(file: string): Manifest[] {
  if (!existsSync(file)) {
    problem(`${rel(file)}: file not found`)
    return []
  }
  const out: Manifest[] = []
  parseAllDocuments(readFileSync(file, 'utf8'), { prettyErrors: true }).forEach((document, index) => {
    for (const error of [...document.errors, ...document.warnings]) problem(`${rel(file)} (document ${index + 1}): ${error.message.trimEnd()}`)
    if (document.errors.length > 0) return
    const doc: unknown = document.toJS()
    if (doc === null || doc === undefined) return // an empty document, e.g. after a trailing ---
    if (!isObj(doc)) problem(`${rel(file)} (document ${index + 1}): not a mapping`)
    else out.push({ file, index, doc })
  })
  return out
}

/** The files a kustomization lists under `resources`, following nested kustomization directories. */
function listResources(kustomization: string, seen = new Set<string>()): string[] {
  if (seen.has(kustomization)) return []
  seen.add(kustomization)
  const [main] = loadDocuments(kustomization)
  if (!main) {
    problem(`${rel(kustomization)}: empty`)
    return []
  }
  if (main.doc.kind !== 'Kustomization') problem(`${rel(kustomization)}: kind is ${String(main.doc.kind)}, expected Kustomization`)
  const base = dirname(kustomization)
  const files: string[] = []
  for (const entry of asArray(main.doc.resources)) {
    if (typeof entry !== 'string') {
      problem(`${rel(kustomization)}: resources entry ${JSON.stringify(entry)} is not a path`)
      continue
    }
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(entry) || entry.startsWith('github.com/')) {
      problem(`${rel(kustomization)}: remote resource ${entry} cannot be validated offline`)
      continue
    }
    const path = resolve(base, entry)
    if (existsSync(path) && statSync(path).isDirectory()) {
      const nested = ['kustomization.yaml', 'kustomization.yml', 'Kustomization'].map((name) => join(path, name)).find(existsSync)
      if (nested) files.push(...listResources(nested, seen))
      else problem(`${rel(kustomization)}: resource directory ${entry} has no kustomization.yaml`)
    } else files.push(path)
  }
  return files
}

/** Validates one manifest with the kubernetes-models class for its apiVersion and kind. */
async function validateModel(m: Manifest): Promise<void> {
  const { apiVersion, kind } = m.doc
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[A-Za-z]+$/.test(kind)) {
    problem(`${describe(m)}: apiVersion and kind must be set`)
    return
  }
  // "v1" -> kubernetes-models/v1/Kind, "apps/v1" -> kubernetes-models/apps/v1/Kind
  const specifier = `kubernetes-models/${apiVersion}/${kind}`
  let Model: new (data: Obj) => { validate(): void }
  try {
    const mod = (await import(specifier)) as Record<string, unknown>
    Model = mod[kind] as typeof Model
    if (typeof Model !== 'function') throw new Error(`${specifier} exports no ${kind}`)
  } catch {
    problem(`${describe(m)}: no Kubernetes schema for ${apiVersion} ${kind} (unknown kind or API version?)`)
    return
  }
  try {
    new Model(m.doc).validate()
  } catch (error) {
    problem(`${describe(m)}: ${(error as Error).message}`)
  }
}

function probePath(container: Obj, probe: string): string | undefined {
  const p = container[probe]
  return isObj(p) && isObj(p.httpGet) && typeof p.httpGet.path === 'string' ? p.httpGet.path : undefined
}

function containersOf(deployment: Obj): Obj[] {
  const spec = isObj(deployment.spec) ? deployment.spec : {}
  const template = isObj(spec.template) ? spec.template : {}
  const podSpec = isObj(template.spec) ? template.spec : {}
  return asArray(podSpec.containers).filter(isObj)
}

function checkDeployment(m: Manifest, configMaps: Map<string, Set<string>>, secretKeys: Map<string, Set<string>>): void {
  const containers = containersOf(m.doc)
  if (containers.length === 0) problem(`${describe(m)}: no containers`)
  for (const container of containers) {
    const where = `${describe(m)} container ${String(container.name)}`
    const readiness = probePath(container, 'readinessProbe')
    const liveness = probePath(container, 'livenessProbe')
    if (readiness !== '/ready') problem(`${where}: readinessProbe must be an httpGet on /ready (found ${readiness ?? 'none'})`)
    if (liveness !== '/health') problem(`${where}: livenessProbe must be an httpGet on /health (found ${liveness ?? 'none'})`)

    // every ConfigMap / Secret key the container reads must exist
    for (const env of asArray(container.env).filter(isObj)) {
      const from = isObj(env.valueFrom) ? env.valueFrom : {}
      for (const [refKind, sources, label] of [
        ['configMapKeyRef', configMaps, 'ConfigMap'],
        ['secretKeyRef', secretKeys, 'Secret (secret.example.yaml)'],
      ] as const) {
        const ref = from[refKind]
        if (!isObj(ref) || ref.optional === true) continue
        const keys = sources.get(String(ref.name))
        if (!keys) problem(`${where}: env ${String(env.name)} reads ${label} ${String(ref.name)}, which is not defined`)
        else if (!keys.has(String(ref.key))) problem(`${where}: env ${String(env.name)} reads key ${String(ref.key)} missing from ${label} ${String(ref.name)}`)
      }
    }
  }
}

/** The gateway plus every directory under services/ that holds a package: name -> package name. */
function components(): Map<string, string> {
  const out = new Map<string, string>([['gateway', '@ats/gateway']])
  const servicesDir = join(root, 'services')
  for (const entry of existsSync(servicesDir) ? readdirSync(servicesDir, { withFileTypes: true }) : []) {
    const manifest = join(servicesDir, entry.name, 'package.json')
    if (!entry.isDirectory() || !existsSync(manifest)) continue
    out.set(entry.name, String((JSON.parse(readFileSync(manifest, 'utf8')) as Obj).name ?? entry.name))
  }
  return out
}

function checkCompose(wanted: Map<string, string>): void {
  if (!existsSync(composePath)) {
    problem(`${rel(composePath)}: file not found`)
    return
  }
  let compose: unknown
  try {
    compose = parse(readFileSync(composePath, 'utf8'), { merge: true, prettyErrors: true })
  } catch (error) {
    problem(`${rel(composePath)}: ${(error as Error).message}`)
    return
  }
  const services = isObj(compose) && isObj(compose.services) ? compose.services : {}
  for (const [name, pkg] of wanted) {
    const service = services[name]
    if (!isObj(service)) {
      problem(`${rel(composePath)}: no service "${name}" (every directory under services/ and the gateway must be in the compose file)`)
      continue
    }
    const command = Array.isArray(service.command) ? service.command.join(' ') : String(service.command ?? '')
    if (!command.includes(pkg)) problem(`${rel(composePath)}: service "${name}" does not start ${pkg} (command: ${command || 'none'})`)
    if (!isObj(service.healthcheck)) problem(`${rel(composePath)}: service "${name}" has no healthcheck`)
  }
}

async function main(): Promise<void> {
  const files = listResources(kustomizationPath)
  const manifests = files.flatMap(loadDocuments)
  const examples = loadDocuments(secretExamplePath)

  if (files.some((file) => file === secretExamplePath)) problem(`${rel(kustomizationPath)}: secret.example.yaml must not be listed in resources`)
  for (const m of manifests) if (m.doc.kind === 'Secret') problem(`${describe(m)}: Secrets must not be shipped as resources (use secret.example.yaml)`)
  if (!examples.some((m) => m.doc.kind === 'Secret')) problem(`${rel(secretExamplePath)}: must hold an example Secret`)

  for (const m of [...manifests, ...examples]) await validateModel(m)

  const keysOf = (kind: string, field: string, from: Manifest[]) => {
    const out = new Map<string, Set<string>>()
    for (const m of from.filter((x) => x.doc.kind === kind)) {
      const data = { ...(isObj(m.doc.data) ? m.doc.data : {}), ...(isObj(m.doc[field]) ? (m.doc[field] as Obj) : {}) }
      out.set(String((m.doc.metadata as Obj | undefined)?.name), new Set(Object.keys(data)))
    }
    return out
  }
  const configMaps = keysOf('ConfigMap', 'binaryData', manifests)
  const secretKeys = keysOf('Secret', 'stringData', examples)
  const deployments = manifests.filter((m) => m.doc.kind === 'Deployment')
  for (const m of deployments) checkDeployment(m, configMaps, secretKeys)

  const wanted = components()
  checkCompose(wanted)
  const deployed = new Set(deployments.map((m) => String((m.doc.metadata as Obj | undefined)?.name)))
  for (const name of wanted.keys()) {
    if (!deployed.has(name)) problem(`${rel(kustomizationPath)}: no Deployment "${name}" (every directory under services/ and the gateway must be deployed)`)
  }

  if (problems.length > 0) {
    process.stderr.write(`validate-deploy: ${problems.length} problem(s)\n${problems.map((p) => `  - ${p}`).join('\n')}\n`)
    process.exit(1)
  }
  const kinds = manifests.map((m) => `${String(m.doc.kind)}/${String((m.doc.metadata as Obj | undefined)?.name)}`)
  process.stdout.write(
    `validate-deploy: ok\n` +
      `  k8s/base: ${manifests.length} documents from ${files.length} files valid (${kinds.join(', ')}); secret.example.yaml valid, not listed\n` +
      `  probes: ${deployments.length} Deployment(s) ready on /ready, live on /health\n` +
      `  components in docker-compose.yml and k8s/base: ${[...wanted.keys()].join(', ')}\n`,
  )
}

await main()
