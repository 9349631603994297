// Giving up the approval a job waits for when the job ends without it (cancelled, failed): the
// swap can then never be approved afterwards. Trading answers an approval already decided as it
// is, so a withdrawal sent twice, or after the decision, changes nothing.
import type { NatsChannels } from '@ats/contracts'
import { callEndpoint, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { Owner } from './store.ts'

/** What a caller of another service's endpoint is given. */
export interface EndpointDeps<E> {
  nc: NatsConnection
  endpoint: E
  log: Logger
  timeoutMs?: number
}

export function createApprovalWithdrawal({ nc, endpoint, log, timeoutMs }: EndpointDeps<NatsChannels['trading']['approvalWithdraw']>) {
  /** Withdraws `approvalId` as the job's owner; a failure is logged (the approval then expires). */
  return async function withdraw(owner: Pick<Owner, 'ownerId' | 'keyId'>, approvalId: string, reason: string): Promise<void> {
    const identity = owner.keyId ? { ownerId: owner.keyId, keyId: owner.keyId } : { ownerId: owner.ownerId }
    try {
      const { approval } = await callEndpoint(nc, endpoint, { id: approvalId, reason }, { identity, timeoutMs })
      log.info({ approvalId, status: approval?.status ?? null }, 'approval withdrawn')
    } catch (error) {
      log.warn({ err: error, approvalId }, 'approval not withdrawn: it expires on its own')
    }
  }
}
export type ApprovalWithdrawal = ReturnType<typeof createApprovalWithdrawal>
