/**
 * Every subject, stream and bucket of the fleet lives under a namespace (NATS_NAMESPACE,
 * default `ats`): two fleets, or tests beside a running fleet, share one NATS server
 * without answering each other's requests or recording each other's payments.
 */
export const defaultNamespace = 'ats'
/** a NATS subject token that is also a valid stream and bucket name part */
export const namespacePattern = '^[a-z0-9][a-z0-9_-]{0,31}$'

/** `<namespace>.<service>.<name>`: the one way a subject is spelled. */
export const subjectOf = (namespace: string, service: string, name: string) => `${namespace}.${service}.${name}`
