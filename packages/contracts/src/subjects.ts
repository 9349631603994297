/**
 * Every NATS subject and JetStream name of the fleet. No other package spells one:
 * import from here so a rename is one edit and a grep finds every user.
 *
 * Everything lives under a namespace (NATS_NAMESPACE, default `ats`): two fleets, or
 * tests beside a running fleet, share one NATS server without answering each other's
 * requests or recording each other's payments.
 */
export const services = {
  admin: { name: 'admin', queue: 'admin' },
} as const

export const defaultNamespace = 'ats'
/** a NATS subject token that is also a valid stream and bucket name part */
export const namespacePattern = '^[a-z0-9][a-z0-9_-]{0,31}$'

export function subjectsFor(namespace: string) {
  return {
    keys: {
      /** request/reply (NATS services API, queue-grouped): resolve a key hash to its entry */
      verify: `${namespace}.admin.keys.verify`,
      /** broadcast: a key was revoked; every gateway evicts it from its cache */
      revoked: `${namespace}.admin.keys.revoked`,
    },
    payments: {
      /** JetStream (stream `<namespace>_payments`): payments a gateway charged, for admin to record and settle */
      charged: `${namespace}.payments.charged`,
      stream: `${namespace}_payments`,
      /** JetStream KV: payers refused at the edge */
      blockedPayers: `${namespace}-blocked-payers`,
    },
  } as const
}
