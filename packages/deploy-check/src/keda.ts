/**
 * KEDA ScaledObjects in a render (k8s/components/keda-agent-workers), which kubernetes-models
 * has no schema for: what KEDA needs to run them, one autoscaler per Deployment, and
 * nats-jetstream triggers on the stream and consumer the agent workers really read. KEDA
 * does not fail on a wrong name: an unknown stream reads as no lag (never scales up), an
 * unknown consumer as the stream's last sequence (scales to the maximum and stays there).
 */
import { agentChannels, defaultNamespace } from '@ats/contracts'
import { arr, type Obj } from './objects.ts'

export const scaledObjectApiVersion = 'keda.sh/v1alpha1'
export const isScaledObject = (doc: Obj): boolean => doc.kind === 'ScaledObject' && String(doc.apiVersion).startsWith('keda.sh/')
/** KEDA's operator (its Helm chart and release YAML: namespace keda), which polls NATS's monitoring port */
export const kedaOperator = 'keda/keda-operator'
export const natsMonitoringPort = 8222

/** Whether the render scales something on NATS JetStream, so KEDA's operator must reach NATS's monitoring port. */
export const scalesOnJetStream = (docs: Obj[]): boolean =>
  docs.some((d) => isScaledObject(d) && arr(d.spec?.triggers).some((t: Obj) => t.type === 'nats-jetstream'))

/** The NATS_NAMESPACE a Deployment's first container sees (its envFrom ConfigMaps, then env); else the code's default. */
function natsNamespaceOf(deployment: Obj, docs: Obj[]): string {
  const container = arr(deployment.spec?.template?.spec?.containers)[0] ?? {}
  let value: unknown
  for (const source of arr(container.envFrom)) {
    const data = docs.find((d) => d.kind === 'ConfigMap' && d.metadata?.name === source.configMapRef?.name)?.data
    if (data?.NATS_NAMESPACE !== undefined) value = data.NATS_NAMESPACE
  }
  const literal = arr(container.env).find((e: Obj) => e.name === 'NATS_NAMESPACE')?.value
  if (literal !== undefined) value = literal
  return typeof value === 'string' && value !== '' ? value : defaultNamespace
}

export function checkScaledObjects(where: string, docs: Obj[], problems: string[]): void {
  for (const so of docs.filter(isScaledObject)) {
    const id = `${where}: ScaledObject ${so.metadata?.name ?? '?'}`
    if (so.apiVersion !== scaledObjectApiVersion)
      problems.push(`${id}: apiVersion ${so.apiVersion}: KEDA 2 serves ${scaledObjectApiVersion}`)
    const spec: Obj = so.spec ?? {}

    // the target: a Deployment of this render, and no HPA of ours beside KEDA's
    const target: Obj = spec.scaleTargetRef ?? {}
    const targetKind = target.kind ?? 'Deployment'
    const deployment = docs.find((d) => d.kind === targetKind && d.metadata?.name === target.name)
    if (typeof target.name !== 'string' || target.name === '')
      problems.push(`${id}: spec.scaleTargetRef.name must name the Deployment it scales`)
    else if (targetKind !== 'Deployment' || !deployment)
      problems.push(`${id}: scales ${targetKind} ${target.name}, which is not a Deployment in the render`)
    for (const hpa of docs.filter(
      (d) =>
        d.kind === 'HorizontalPodAutoscaler' &&
        (d.spec?.scaleTargetRef?.kind ?? 'Deployment') === targetKind &&
        d.spec?.scaleTargetRef?.name === target.name,
    )) {
      problems.push(
        `${id}: HorizontalPodAutoscaler ${hpa.metadata?.name} scales ${targetKind} ${target.name} too: KEDA makes its own, and two would fight over its replicas (delete it with $patch: delete)`,
      )
    }

    // bounds, with KEDA's defaults
    const min = spec.minReplicaCount ?? 0
    const max = spec.maxReplicaCount ?? 100
    if (!Number.isInteger(min) || min < 0 || !Number.isInteger(max) || max < 1)
      problems.push(`${id}: minReplicaCount (${min}) and maxReplicaCount (${max}) must be whole numbers, max at least 1`)
    else if (min > max) problems.push(`${id}: minReplicaCount ${min} is above maxReplicaCount ${max}`)

    const triggers = arr(spec.triggers)
    if (triggers.length === 0) problems.push(`${id}: no triggers: KEDA has nothing to scale on`)
    for (const [i, trigger] of triggers.entries()) {
      if (trigger?.type === 'nats-jetstream')
        checkJetStreamTrigger(`${id} trigger ${i + 1} (nats-jetstream)`, trigger.metadata ?? {}, deployment, docs, problems)
    }
  }
}

function checkJetStreamTrigger(id: string, meta: Obj, deployment: Obj | undefined, docs: Obj[], problems: string[]): void {
  for (const key of ['natsServerMonitoringEndpoint', 'account', 'stream', 'consumer', 'lagThreshold']) {
    if (typeof meta[key] !== 'string' || meta[key] === '') problems.push(`${id}: metadata.${key} must be set (a string)`)
  }
  if (typeof meta.lagThreshold === 'string' && !/^[1-9][0-9]*$/.test(meta.lagThreshold)) {
    problems.push(
      `${id}: lagThreshold must be a positive whole number in a string (jobs per replica), got ${JSON.stringify(meta.lagThreshold)}`,
    )
  }
  if (meta.activationLagThreshold !== undefined && !/^[0-9]+$/.test(String(meta.activationLagThreshold))) {
    problems.push(`${id}: activationLagThreshold must be a whole number in a string, got ${JSON.stringify(meta.activationLagThreshold)}`)
  }

  // the names the workers use (@ats/contracts), under the NATS_NAMESPACE the scaled pods see
  if (deployment) {
    const namespace = natsNamespaceOf(deployment, docs)
    const channels = agentChannels(namespace)
    if (typeof meta.stream === 'string' && meta.stream !== channels.jobsStream.name) {
      problems.push(
        `${id}: stream ${meta.stream} is not the agent job stream ${channels.jobsStream.name} (NATS_NAMESPACE ${namespace}): KEDA would see no lag and never scale up`,
      )
    }
    if (typeof meta.consumer === 'string' && meta.consumer !== channels.workers) {
      problems.push(
        `${id}: consumer ${meta.consumer} is not the workers' durable consumer ${channels.workers}: KEDA would read the stream's last sequence as the lag and scale to the maximum`,
      )
    }
  }

  // a NATS Service of this render: the endpoint must name it, in its namespace, on a port it exposes
  const endpoint = /^(?:https?:\/\/)?([a-z0-9-]+)(?:\.([a-z0-9-]+))?[a-z0-9.-]*:([0-9]+)$/.exec(
    String(meta.natsServerMonitoringEndpoint ?? ''),
  )
  const service = endpoint && docs.find((d) => d.kind === 'Service' && d.metadata?.name === endpoint[1])
  if (endpoint && service) {
    const [, name, namespace, port] = endpoint
    if (service.metadata.namespace && namespace !== service.metadata.namespace) {
      problems.push(
        `${id}: natsServerMonitoringEndpoint ${meta.natsServerMonitoringEndpoint}: Service ${name} is in namespace ${service.metadata.namespace}; KEDA's operator runs in its own, so name it ${name}.${service.metadata.namespace}.svc.cluster.local`,
      )
    }
    if (!arr(service.spec?.ports).some((p: Obj) => p.port === Number(port))) {
      problems.push(
        `${id}: natsServerMonitoringEndpoint ${meta.natsServerMonitoringEndpoint}: Service ${name} does not expose port ${port} (NATS's monitoring port, -m ${natsMonitoringPort})`,
      )
    }
  }
}
