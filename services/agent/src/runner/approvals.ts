// A swap that waits for a person's approval, as a job lives it: what the worker does meanwhile
// (ApprovalWaits), what the job says while it waits (the notice), and why it did not swap.
import type { Approval } from '@ats/contracts'

/** What a job does while a swap of it waits for approval (the worker: its status, its time limit). */
export interface ApprovalWaits {
  /** a paid job's deadline (ms since the epoch): its approvals cannot wait past it (trading caps their expiry) */
  readonly decideBy?: number | undefined
  /** the job waits: status awaiting_approval with the approval and its notice, its run-time limit paused */
  begin(approval: Approval, notice: string): Promise<void>
  /** the approval was decided: the job runs on */
  end(): Promise<void>
}

/** A wait that changes nothing about the job (a toolbox without a worker: tests). */
export const noApprovalWaits: ApprovalWaits = { begin: async () => {}, end: async () => {} }

const minutes = (ms: number) => {
  const m = Math.round(ms / 60_000)
  return m >= 1 ? `${m} minute${m === 1 ? '' : 's'}` : `${Math.round(ms / 1000)} s`
}

const usd = (n: number) => `$${n.toFixed(2)}`

/** Who may approve, in words: never the requester unless its policy set selfApprove (trading decides it the same way). */
function decidersOf(a: Approval): string {
  const who = ['an admin key']
  if (a.requestedBy.keyId === null && a.requestedBy.ownerId) who.push(`a key bound to wallet ${a.requestedBy.ownerId}`)
  who.push('a key the policy names in approvers')
  if (a.policy.selfApprove && a.requestedBy.keyId) who.push(`key ${a.requestedBy.keyId} itself (its policy sets selfApprove)`)
  return `${who.slice(0, -1).join(', ')}${who.length > 2 ? ',' : ''} or ${who.at(-1)}`
}

/**
 * What a waiting swap asks of a person, in plain words: the swap, why it waits, who decides it and
 * where, and by when. `swap`: the amount and tokens as the job named them.
 */
export function approvalNotice(a: Approval, swap: { amount: string; tokenIn: string; tokenOut: string }): string {
  const worth = a.quote.usdValue === null ? 'worth an unknown amount in USD' : `worth ${usd(a.quote.usdValue)}`
  const why = `${worth}, over the ${usd(a.policy.approvalAboveUsd)} approval threshold of ${a.policy.owner}`
  const by = a.expiresWithPayment ? ', before the payment that bought this job can no longer be settled' : ''
  return `Approval needed: swap ${swap.amount} ${swap.tokenIn} for ${swap.tokenOut} (${why}). A person decides it (${decidersOf(a)}): approve with POST ${a.links.approve}, or reject with POST ${a.links.reject}${a.links.console ? ` (or open ${a.links.console} in the web console)` : ''}, within ${minutes(a.expiresAt - Date.now())}${by}.`
}

/** Whether a person's decision is still to come, or (approved) its swap still runs. */
export const undecided = (a: Approval) => a.status === 'pending' || (a.status === 'approved' && a.result === null && a.error === null)

/** Why a decided approval did not swap, in plain words (null: it swapped). */
export function notSwappedReason(a: Approval): string | null {
  if (a.status === 'approved' && a.result) return null
  if (a.status === 'approved')
    return `approval ${a.id} was approved by ${a.decidedBy ?? 'someone'}, but the swap was not made: ${a.error ?? 'no reason given'}`
  if (a.status === 'rejected') {
    const why = a.decisionReason ?? a.error
    return `approval ${a.id} was rejected by ${a.decidedBy ?? 'someone'}${why ? `: ${why}` : ''}`
  }
  if (a.status === 'expired') return `approval ${a.id} expired after ${minutes(a.expiresAt - a.createdAt)} without a decision`
  return `approval ${a.id} is still ${a.status}`
}
