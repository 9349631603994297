import { Type, type Static } from 'typebox'
import { TierSchema } from '../common/identity.ts'
import { endpoint, topic } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { eventChannels } from '../common/events.ts'
import { Address, Sha256Hex } from '../common/primitives.ts'
import { creditChannels, CreditSnapshotReply, CreditSnapshotRequest } from './credit.ts'
import { AgentPayer, SpendPolicy } from './http.ts'
import { PaymentsOfJobsReply, PaymentsOfJobsRequest, paymentChannels } from './payments.ts'

/** admin.keys.verify request: the SHA-256 of the raw key (raw keys never travel). */
export const KeyVerifyRequest = Type.Object({ hash: Sha256Hex() })

/** admin.keys.verify reply: the active key, or null when unknown or revoked. */
export const KeyVerifyReply = Type.Object({
  key: Type.Union([Type.Object({ id: Type.String(), tier: TierSchema, wallet: Type.Union([Address(), Type.Null()]) }), Type.Null()]),
})
export type KeyVerifyReply = Static<typeof KeyVerifyReply>

/** admin.keys.policy request: the id of the key a swap is made with (x-ats-key-id). */
export const KeyPolicyRequest = Type.Object({ keyId: Type.String({ minLength: 1, maxLength: 64 }) })

/** admin.keys.policy reply: the active key with its spend policy (null: none) and bound wallet (null: none), or null when unknown or revoked. */
export const KeyPolicyReply = Type.Object({
  key: Type.Union([
    Type.Object({
      id: Type.String(),
      tier: TierSchema,
      policy: Type.Union([SpendPolicy, Type.Null()]),
      wallet: Type.Union([Address(), Type.Null()]),
    }),
    Type.Null(),
  ]),
})
export type KeyPolicyReply = Static<typeof KeyPolicyReply>

/** admin.keys.revoked broadcast. */
export const KeyRevoked = Type.Object({ id: Type.String(), hash: Sha256Hex() })

/** admin.keys.created broadcast: the new key's entry, as admin.keys.verify would answer it, and its hash. */
export const KeyCreated = Type.Object({
  id: Type.String(),
  hash: Sha256Hex(),
  tier: TierSchema,
  wallet: Type.Union([Address(), Type.Null()]),
})

/** admin's NATS channels in one namespace. */
export function adminChannels(namespace: string) {
  return {
    /** request/reply (NATS services API, queue-grouped): resolve a key hash to its entry */
    keyVerify: endpoint(subjectOf(namespace, 'admin', 'keys.verify'), KeyVerifyRequest, KeyVerifyReply),
    /** request/reply: the spend policy of an active key, asked by trading before every swap */
    keyPolicy: endpoint(subjectOf(namespace, 'admin', 'keys.policy'), KeyPolicyRequest, KeyPolicyReply),
    /** request/reply: the payer's entry on the agent allowlist (null: not on it), asked before a server-wallet swap */
    agentPayer: endpoint(
      subjectOf(namespace, 'admin', 'agent-payers.get'),
      Type.Object({ address: Address() }),
      Type.Object({ payer: Type.Union([AgentPayer, Type.Null()]) }),
    ),
    /** request/reply: the payments of paid agent jobs (pending, settled, voided, failed), for the job answers */
    paymentsOfJobs: endpoint(subjectOf(namespace, 'admin', 'payments.of-jobs'), PaymentsOfJobsRequest, PaymentsOfJobsReply),
    /** broadcast: a key was revoked; every gateway evicts it from its cache */
    keyRevoked: topic(subjectOf(namespace, 'admin', 'keys.revoked'), KeyRevoked),
    /** broadcast: a key was created; every gateway caches it, so it works at once even where unknown keys are refused */
    keyCreated: topic(subjectOf(namespace, 'admin', 'keys.created'), KeyCreated),
    /** the KV bucket of the server wallet's kill switch (key walletControlKey), watched by trading and automation */
    walletControl: `${namespace}-wallet-control`,
    /** charged payments (gateway -> JetStream -> admin's ledger) and the blocked payers */
    payments: paymentChannels(namespace),
    /** the events stream: every service's outbox publishes there, admin delivers them to webhook subscriptions */
    events: eventChannels(namespace),
    /** prepaid credit: debits and usage reports (gateways, metered services -> admin), adjustments (admin -> gateways) */
    credit: creditChannels(namespace),
    /** request/reply: a wallet's available credit once every debit published before the request is recorded */
    creditSnapshot: endpoint(subjectOf(namespace, 'admin', 'credit.snapshot'), CreditSnapshotRequest, CreditSnapshotReply),
  }
}
export type AdminChannels = ReturnType<typeof adminChannels>
