/** k8s: kustomize renders of the base and every overlay, schema-validated, and the fleet's rules for the documents. */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import { loadConfig } from '@ats/service-kit'
import { parseAllDocuments } from 'yaml'
import { checkDeploymentAccess, checkNatsWorkload } from './access.ts'
import type { Component } from './components.ts'
import { contentKey } from './contentKey.ts'
import { checkScaledObjects, isScaledObject, kedaOperator, natsMonitoringPort, scalesOnJetStream } from './keda.ts'
import { kustomizeAsync } from './kubectl.ts'
import { arr, isObj, type Obj } from './objects.ts'
import type { Report } from './validate.ts'

export const overlays = (root: string): string[] => [
  'k8s/base',
  ...(existsSync(join(root, 'k8s/overlays'))
    ? readdirSync(join(root, 'k8s/overlays'))
        .sort()
        .map((d) => `k8s/overlays/${d}`)
    : []),
]

/**
 * Renders and checks k8s/base and every overlay (or only `dirs`) against the fleet's components.
 * The renders are independent: kubectl runs them side by side; their problems are listed in order.
 */
export async function checkKubernetes(
  root: string,
  fleet: Component[],
  problems: string[],
  notes: string[],
  dirs = overlays(root),
): Promise<void> {
  const example = loadYaml(join(root, 'k8s/base/secret.example.yaml'), problems).find((d) => d.kind === 'Secret')
  if (!example) problems.push('k8s/base/secret.example.yaml: must hold an example Secret (the keys operators create)')
  // hashed once for every overlay of this check: overlays reach into base, so each one's key is all of k8s/
  const key = `${contentKey([join(root, 'k8s')])}\0${JSON.stringify(fleet, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}`
  const reports = await Promise.all(
    dirs.map(async (dir) => {
      const cached = checked.get(`${dir}\0${key}`)
      if (cached) return cached
      const report = await checkOverlay(root, dir, fleet, example)
      if (report.rendered) checked.set(`${dir}\0${key}`, report)
      return report
    }),
  )
  for (const report of reports) {
    problems.push(...report.problems)
    notes.push(...report.notes)
  }
}

/**
 * An overlay's check is a function of the files of k8s/ (its render, secret.example.yaml) and of
 * the fleet, and its render (`kubectl kustomize`) most of its time: a process checks each distinct
 * content once (the tests check copies that differ in one file). Only checks that rendered are
 * kept: a kustomize failure is run again, so its message names the copy it was found in.
 */
const checked = new Map<string, Report>()

async function checkOverlay(
  root: string,
  dir: string,
  fleet: Component[],
  example: Obj | undefined,
): Promise<Report & { rendered: boolean }> {
  const problems: string[] = []
  let rendered: string
  try {
    rendered = await kustomizeAsync(join(root, dir))
  } catch (error) {
    return { problems: [`${dir}: kustomize failed: ${(error as Error).message}`], notes: [], rendered: false }
  }
  const docs: Obj[] = []
  parseAllDocuments(rendered).forEach((d, i) => {
    const doc: unknown = d.errors.length > 0 ? undefined : d.toJS()
    if (d.errors.length > 0) problems.push(`${dir}: rendered document ${i + 1}: ${d.errors[0]!.message}`)
    else if (isObj(doc)) docs.push(doc)
  })
  for (const doc of docs.filter((d) => !isScaledObject(d))) await validateSchema(dir, doc, problems)
  checkManifests(dir, docs, fleet, example, problems)
  checkScaledObjects(dir, docs, problems)
  return { problems, notes: [`${dir}: ${docs.length} documents rendered and valid`], rendered: true }
}

function loadYaml(path: string, problems: string[]): Obj[] {
  if (!existsSync(path)) {
    problems.push(`${path}: file not found`)
    return []
  }
  return parseAllDocuments(readFileSync(path, 'utf8'))
    .map((d) => d.toJS() as unknown)
    .filter(isObj)
}

async function validateSchema(where: string, doc: Obj, problems: string[]): Promise<void> {
  const { apiVersion, kind } = doc
  const name = `${where}: ${String(kind)} ${String(doc.metadata?.name ?? '?')}`
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[A-Za-z]+$/.test(kind)) {
    problems.push(`${name}: apiVersion and kind must be set`)
    return
  }
  let Model: new (data: Obj) => { validate(): void }
  try {
    Model = ((await import(`kubernetes-models/${apiVersion}/${kind}`)) as Obj)[kind]
    if (typeof Model !== 'function') throw new Error('no model')
  } catch {
    problems.push(`${name}: no Kubernetes schema for ${apiVersion} ${kind} (unknown kind or API version?)`)
    return
  }
  // kustomize folds long base64 values over lines; Kubernetes' decoder skips the newlines
  const data =
    doc.kind === 'Secret' && isObj(doc.data)
      ? Object.fromEntries(Object.entries(doc.data).map(([k, v]) => [k, String(v).replace(/\s/g, '')]))
      : undefined
  try {
    new Model(data ? { ...doc, data } : doc).validate()
  } catch (error) {
    problems.push(`${name}: ${(error as Error).message}`)
  }
}

const imageName = (image: string) =>
  image
    .replace(/[:@].*$/, '')
    .split('/')
    .at(-1) ?? ''
const podSpec = (workload: Obj): Obj => workload.spec?.template?.spec ?? {}
const podLabels = (workload: Obj): Obj => workload.spec?.template?.metadata?.labels ?? {}
const matches = (selector: Obj | undefined, labels: Obj) => {
  if (!isObj(selector)) return false
  const byLabels = Object.entries(selector.matchLabels ?? {}).every(([k, v]) => labels[k] === v)
  const byExpressions = arr(selector.matchExpressions).every((e: Obj) => e.operator === 'In' && arr(e.values).includes(labels[e.key]))
  return byLabels && byExpressions
}
/**
 * the pod names (app.kubernetes.io/name) a NetworkPolicy peer admits, `namespace/name` for
 * pods of one other namespace (kubernetes.io/metadata.name); undefined: anything
 */
const peerNames = (peer: Obj): string[] | undefined => {
  if (peer.ipBlock || !isObj(peer.podSelector)) return undefined
  const sel = peer.podSelector
  const name = sel.matchLabels?.['app.kubernetes.io/name']
  const expr = arr(sel.matchExpressions).find((e: Obj) => e.key === 'app.kubernetes.io/name' && e.operator === 'In')
  const names = typeof name === 'string' ? [name] : expr ? arr(expr.values) : undefined
  if (!peer.namespaceSelector) return names
  const namespace = peer.namespaceSelector.matchLabels?.['kubernetes.io/metadata.name']
  return names && typeof namespace === 'string' ? names.map((n) => `${namespace}/${n}`) : undefined
}

/**
 * The Ingress NetworkPolicies selecting a workload's pods let in only what `allowed` says: a
 * problem when no policy selects them (`none` says who may reach them), and one for each peer a
 * policy lets in beyond that (pod names, or "anything" for a rule without a pod selector), as
 * only `only` may.
 */
function checkIngress(
  where: string,
  workload: Obj,
  policies: Obj[],
  allowed: (name: string, rule: Obj) => boolean,
  { none, only }: { none: string; only: string },
  problems: string[],
): void {
  const { name } = workload.metadata
  const mine = policies.filter((p) => matches(p.spec?.podSelector, podLabels(workload)) && arr(p.spec?.policyTypes).includes('Ingress'))
  if (mine.length === 0) problems.push(`${where}: ${workload.kind} ${name}: no NetworkPolicy; ${none}`)
  for (const p of mine) {
    for (const rule of arr(p.spec.ingress)) {
      for (const peer of rule.from ? arr(rule.from) : [{}]) {
        const admitted = peerNames(peer)
        const who = admitted === undefined ? ['anything'] : admitted.filter((n) => !allowed(n, rule))
        if (who.length > 0)
          problems.push(`${where}: NetworkPolicy ${p.metadata.name} lets ${who.join(', ')} reach ${name}; only ${only} may`)
      }
    }
  }
}

function checkManifests(where: string, docs: Obj[], fleet: Component[], example: Obj | undefined, problems: string[]): void {
  const of = (kind: string) => docs.filter((d) => d.kind === kind)
  const workloads = docs.filter((d) => d.kind === 'Deployment' || d.kind === 'StatefulSet')
  for (const w of workloads) checkNatsWorkload(where, w, problems)
  const configMaps = new Map<string, Obj>(of('ConfigMap').map((c) => [c.metadata.name as string, { ...c.data }]))
  // the keys of each Secret: those the render ships, else the example's (the keys operators create)
  const keysOf = (s: Obj): [string, Set<string>] => [s.metadata?.name, new Set(Object.keys({ ...s.data, ...s.stringData }))]
  const secrets = new Map([...(example ? [keysOf(example)] : []), ...of('Secret').map(keysOf)])
  if (of('Secret').length > 0 && !/^dev(-|$)/.test(basename(where))) {
    problems.push(
      `${where}: ships a Secret: only overlays/dev and the overlays built on it (dev-*) may (development values); operators create ats-secrets`,
    )
  }
  // an overlay's own resources are in no namespace unless it sets one: they would land in kubectl's
  const namespaces = new Set(docs.filter((d) => d.kind !== 'Namespace').map((d) => d.metadata?.namespace ?? '(none)'))
  if (namespaces.size > 1)
    problems.push(
      `${where}: documents in ${namespaces.size} namespaces (${[...namespaces].join(', ')}): set namespace: in the kustomization`,
    )
  const policies = of('NetworkPolicy')

  // every workload: no root, resources, probes
  for (const w of workloads) {
    const pod = podSpec(w)
    const id = `${where}: ${w.kind} ${w.metadata?.name}`
    for (const c of [...arr(pod.initContainers), ...arr(pod.containers)]) {
      const cid = `${id} container ${c.name}`
      const nonRoot = c.securityContext?.runAsNonRoot ?? pod.securityContext?.runAsNonRoot
      const uid = c.securityContext?.runAsUser ?? pod.securityContext?.runAsUser
      if (nonRoot !== true) problems.push(`${cid}: runAsNonRoot must be true`)
      if (uid === 0) problems.push(`${cid}: runs as uid 0 (root)`)
      if (c.securityContext?.allowPrivilegeEscalation !== false) problems.push(`${cid}: allowPrivilegeEscalation must be false`)
      if (c.securityContext?.readOnlyRootFilesystem !== true) problems.push(`${cid}: readOnlyRootFilesystem must be true`)
      if (!arr(c.securityContext?.capabilities?.drop).includes('ALL')) problems.push(`${cid}: capabilities must drop ALL`)
      for (const kind of ['requests', 'limits']) {
        for (const r of ['cpu', 'memory']) if (!c.resources?.[kind]?.[r]) problems.push(`${cid}: no resources.${kind}.${r}`)
      }
      if (!c.readinessProbe) problems.push(`${cid}: no readinessProbe`)
      if (!c.livenessProbe) problems.push(`${cid}: no livenessProbe`)
    }
  }

  // the fleet's components
  for (const component of fleet) {
    const deployments = of('Deployment').filter((d) =>
      arr(podSpec(d).containers).some((c: Obj) => imageName(c.image) === `ats-${component.name}`),
    )
    if (deployments.length === 0) problems.push(`${where}: no Deployment runs ${component.name} (image ats-${component.name})`)
    for (const d of deployments) checkComponent(where, d, component, { docs, configMaps, secrets, policies }, problems)
  }

  // datastores (overlays that run them): only the fleet reaches them
  const fleetPods = new Set(
    of('Deployment')
      .filter((d) => arr(podSpec(d).containers).some((c: Obj) => imageName(c.image).startsWith('ats-')))
      .map((d) => podLabels(d)['app.kubernetes.io/name']),
  )
  const isDatastore = (w: Obj) =>
    podLabels(w)['app.kubernetes.io/component'] === 'datastore' ||
    arr(podSpec(w).containers).some((c: Obj) => /^(postgres|nats|redis)$/.test(imageName(c.image)))
  // and KEDA's operator NATS's monitoring port, when the render scales on JetStream
  const kedaReadsNats = scalesOnJetStream(docs)
  const monitoringOnly = (rule: Obj) => arr(rule.ports).length > 0 && arr(rule.ports).every((p: Obj) => p.port === natsMonitoringPort)
  for (const w of workloads.filter(isDatastore)) {
    const kedaMayRead = kedaReadsNats && podLabels(w)['app.kubernetes.io/name'] === 'nats'
    const allowed = (name: string, rule: Obj) => fleetPods.has(name) || (kedaMayRead && name === kedaOperator && monitoringOnly(rule))
    checkIngress(where, w, policies, allowed, { none: 'only the services may reach a datastore', only: "the fleet's pods" }, problems)
  }

  // the Ingress goes to the gateway's Service
  const ingresses = of('Ingress')
  const toGateway = ingresses.some((i) =>
    arr(i.spec?.rules).some((r: Obj) => arr(r.http?.paths).some((p: Obj) => p.backend?.service?.name === 'gateway')),
  )
  if (!toGateway) problems.push(`${where}: no Ingress routes to the gateway Service`)
}

interface Context {
  docs: Obj[]
  configMaps: Map<string, Obj>
  secrets: Map<string, Set<string>>
  policies: Obj[]
}

function checkComponent(where: string, d: Obj, component: Component, ctx: Context, problems: string[]): void {
  const id = `${where}: Deployment ${d.metadata.name}`
  const pod = podSpec(d)
  const labels = podLabels(d)
  const container = arr(pod.containers).find((c: Obj) => imageName(c.image) === `ats-${component.name}`)!
  const env = new Map<string, Obj>(arr(container.env).map((e: Obj) => [e.name, e]))
  checkDeploymentAccess(id, component.name, container, problems)
  const literal = (name: string) => env.get(name)?.value as string | undefined

  // probes where the process serves them: /health on PORT, /ready on OPS_PORT (the gateway) or PORT
  const portOf = (probe: Obj | undefined): number | undefined => {
    const port = probe?.httpGet?.port
    if (typeof port === 'number') return port
    return arr(container.ports).find((p: Obj) => p.name === port)?.containerPort
  }
  const port = Number(literal('PORT'))
  const readyPort = component.settings.OPS_PORT ? Number(literal('OPS_PORT')) : port
  if (!Number.isInteger(port)) problems.push(`${id}: PORT must be set as a literal (it is the containerPort the probes use)`)
  if (component.settings.OPS_PORT && !Number.isInteger(readyPort))
    problems.push(`${id}: OPS_PORT must be set as a literal (/ready answers there only)`)
  const probe = (kind: string, path: string, expected: number) => {
    const p = container[kind]
    if (p?.httpGet?.path !== path) problems.push(`${id}: ${kind} must be an httpGet on ${path} (found ${p?.httpGet?.path ?? 'none'})`)
    else if (portOf(p) !== expected)
      problems.push(
        `${id}: ${kind} probes port ${String(p.httpGet.port)} (${portOf(p) ?? '?'}), but ${component.name} serves ${path} on ${expected}`,
      )
  }
  probe('startupProbe', '/health', port)
  probe('readinessProbe', '/ready', readyPort)
  probe('livenessProbe', '/health', port)

  // drain: preStop sleep, then SIGTERM; the grace period covers both
  const sleep = arr(container.lifecycle?.preStop?.exec?.command)
  const seconds = sleep[0] === 'sleep' ? Number(sleep[1]) : Number.NaN
  if (!Number.isFinite(seconds) || seconds < 1) problems.push(`${id}: needs a preStop sleep so endpoints drain before SIGTERM`)
  const grace = pod.terminationGracePeriodSeconds ?? 30
  if (Number.isFinite(seconds) && grace < seconds + 15)
    problems.push(`${id}: terminationGracePeriodSeconds ${grace} does not cover the preStop sleep (${seconds} s) and 15 s of drain`)

  // HPA, PDB, Service, NetworkPolicy
  const scales = (x: Obj) =>
    (x.kind === 'HorizontalPodAutoscaler' || isScaledObject(x)) &&
    (x.spec?.scaleTargetRef?.kind ?? 'Deployment') === 'Deployment' &&
    x.spec?.scaleTargetRef?.name === d.metadata.name
  if (!ctx.docs.some(scales)) problems.push(`${id}: no HorizontalPodAutoscaler scales it (nor a KEDA ScaledObject)`)
  if (!ctx.docs.some((x) => x.kind === 'PodDisruptionBudget' && matches(x.spec?.selector, labels)))
    problems.push(`${id}: no PodDisruptionBudget selects its pods`)
  if (
    d.metadata.name === component.name &&
    !ctx.docs.some((x) => x.kind === 'Service' && isObj(x.spec?.selector) && matches({ matchLabels: x.spec.selector }, labels))
  ) {
    problems.push(`${id}: no Service selects its pods`)
  }
  const gatewayOnly = { none: 'only the gateway may reach a service', only: 'the gateway' }
  if (component.name !== 'gateway') checkIngress(where, d, ctx.policies, (name) => name === 'gateway', gatewayOnly, problems)

  // every setting from a ConfigMap, a Secret, or (structural ones) a literal
  // what the process sees: envFrom in order, then env over it (Kubernetes' precedence)
  const values = new Map<string, string>()
  for (const source of arr(container.envFrom)) {
    if (source.secretRef) problems.push(`${id}: envFrom secretRef hands it every secret; reference the keys it reads (secretKeyRef)`)
    const name = source.configMapRef?.name
    if (!name) continue
    const data = ctx.configMaps.get(name)
    if (!data) problems.push(`${id}: envFrom ConfigMap ${name}, which is not in the output`)
    else for (const [k, v] of Object.entries(data)) values.set(k, String(v))
  }
  const fromConfigMaps = new Set(values.keys())
  for (const e of env.values()) {
    if (typeof e.value === 'string') values.set(e.name, e.value)
    const ref = e.valueFrom?.configMapKeyRef
    if (!ref) continue
    const value = ctx.configMaps.get(ref.name)?.[ref.key]
    if (value !== undefined) values.set(e.name, String(value))
    else if (ref.optional !== true) problems.push(`${id}: ${e.name} reads ConfigMap ${ref.name} key ${ref.key}, which does not exist`)
  }
  for (const [name, setting] of Object.entries(component.settings)) {
    const e = env.get(name)
    const secretRef = e?.valueFrom?.secretKeyRef
    if (setting.secret) {
      if (!secretRef) {
        problems.push(
          `${id}: ${name} is a secret setting: it must come from a Secret (secretKeyRef)${e || fromConfigMaps.has(name) ? ', not a literal or a ConfigMap' : ''}`,
        )
      } else if (
        !ctx.secrets.get(secretRef.name)?.has(secretRef.key) &&
        !(secretRef.optional === true && ctx.secrets.has(secretRef.name))
      ) {
        // an optional key may be absent (the dev Secret leaves the wallet and API keys out); a Secret may not
        problems.push(
          `${id}: ${name} reads key ${secretRef.key} of Secret ${secretRef.name}, which ${ctx.secrets.has(secretRef.name) ? 'lacks it' : 'is neither in the output nor in secret.example.yaml'}`,
        )
      } else if (setting.optional !== (secretRef.optional === true)) {
        problems.push(
          `${id}: ${name} is ${setting.optional ? 'optional' : 'required'}, so its secretKeyRef must ${setting.optional ? '' : 'not '}be optional`,
        )
      }
    } else if (!e && !fromConfigMaps.has(name)) {
      problems.push(
        `${id}: setting ${name} is not in its ConfigMaps (envFrom) or env: every setting the process reads is spelled out (an empty value means unset)`,
      )
    }
    // the value must be one the process accepts at start (as the kit reads it: empty is unset)
    const value = values.get(name)
    if (!setting.secret && value !== undefined && value !== '') {
      try {
        loadConfig({ [name]: setting.schema }, { [name]: value })
      } catch (error) {
        problems.push(`${id}: ${(error as Error).message}; the process would not start`)
      }
    }
  }
}
