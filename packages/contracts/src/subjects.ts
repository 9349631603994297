/**
 * Every NATS subject of the fleet. No other package spells a subject string:
 * import from here so a rename is one edit and a grep finds every user.
 */
export const services = {
  admin: { name: 'admin', queue: 'admin' },
} as const

export const subjects = {
  keys: {
    /** request/reply (NATS services API, queue-grouped): resolve a key hash to its entry */
    verify: 'ats.admin.keys.verify',
    /** broadcast: a key was revoked; every gateway evicts it from its cache */
    revoked: 'ats.admin.keys.revoked',
  },
  payments: {
    /** JetStream (stream PAYMENTS_STREAM): a payment the gateway charged, for admin to record and settle */
    charged: (stream: string) => `ats.payments.${stream}.charged`,
  },
} as const
