// Runs that wait for a person's approval (a spend policy's approvalAboveUsd): every
// APPROVAL_POLL_MS each replica claims the waiting runs due a look (store.claimWaiting: one replica
// per run), asks trading how their approval stands and ends the runs it decided. Ending a run is
// conditional on it still waiting, so a repeat (a replica that died mid-look) changes nothing. A run
// whose automation is no longer active withdraws its approval first: nobody can approve a swap its
// owner stopped.
import type { Approval, NatsChannels } from '@ats/contracts'
import { callEndpoint, startWorkerLoop, type Logger, type ServiceConfig } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import type { Automation, AutomationRun } from '../generated/prisma/client.ts'
import { isTrigger } from '../automations/types.ts'
import { identityOf, swapOutcome, type RunOutcome, type Store } from '../automations/store.ts'
import type { automationSettings } from '../settings.ts'

/** What an approval means for the run waiting for it. */
export type ApprovalOutcome = { kind: 'waiting' } | { kind: 'finished'; outcome: RunOutcome } | { kind: 'skipped'; reason: string }

/** How long an approval could be decided: "15 minutes" (seconds below a minute). */
function lifetime(approval: Approval) {
  const ms = approval.expiresAt - approval.createdAt
  return ms >= 60_000 ? `${Math.round(ms / 60_000)} minutes` : `${Math.round(ms / 1000)} seconds`
}

/** What an approval's state means for its run; approved with neither result nor error, the swap is under way. */
export function approvalOutcome(id: string, approval: Approval | null): ApprovalOutcome {
  if (!approval) return { kind: 'finished', outcome: { ok: false, error: `not swapped: trading does not know approval ${id}` } }
  const { result, error } = approval
  switch (approval.status) {
    case 'pending':
      return { kind: 'waiting' }
    case 'approved':
      if (result) return { kind: 'finished', outcome: swapOutcome(result, 'the approved swap reverted on chain') }
      if (error) return { kind: 'finished', outcome: { ok: false, error: `not swapped: approval ${id} was approved, but ${error}` } }
      return { kind: 'waiting' }
    case 'expired':
      return { kind: 'skipped', reason: `not swapped: approval ${id} expired after ${lifetime(approval)}` }
    case 'rejected': {
      const by = approval.decidedBy === 'requester' ? ' (withdrawn)' : approval.decidedBy ? ` by ${approval.decidedBy}` : ''
      const why = approval.decisionReason ?? error
      return { kind: 'skipped', reason: `not swapped: approval ${id} was rejected${by}${why ? `: ${why}` : ''}` }
    }
  }
}

export interface ApprovalWatchDeps {
  nc: NatsConnection
  channels: NatsChannels
  store: Store
  log: Logger
  settings: ServiceConfig<typeof automationSettings>
}

/** Gives up the approval of a run nobody waits for any more; trading answers it as it now stands. */
export async function withdrawApproval(
  { nc, channels }: Pick<ApprovalWatchDeps, 'nc' | 'channels'>,
  automation: Automation,
  id: string,
  reason: string,
  timeoutMs: number,
) {
  const { approval } = await callEndpoint(
    nc,
    channels.trading.approvalWithdraw,
    { id, reason },
    { identity: identityOf(automation), timeoutMs },
  )
  return approval
}

/** how long trading has to answer */
const timeoutMs = 10_000

export function startApprovalWatch(deps: ApprovalWatchDeps) {
  const { nc, channels, store, log, settings } = deps
  const { APPROVAL_POLL_MS: pollMs, AUTOMATION_BATCH: batch } = settings

  async function look(run: AutomationRun & { automation: Automation }) {
    const { automation } = run
    const id = run.approvalId!
    const context = { automationId: automation.id, runId: run.id, approvalId: id }
    let next: ApprovalOutcome
    if (automation.status !== 'active') {
      const stopped = `automation ${automation.status}`
      const approval = await withdrawApproval(deps, automation, id, stopped, timeoutMs)
      next =
        approval?.status === 'rejected' && approval.decidedBy === 'requester'
          ? { kind: 'skipped', reason: `not swapped: ${stopped} while approval ${id} waited` }
          : approvalOutcome(id, approval)
    } else {
      const { approval } = await callEndpoint(nc, channels.trading.approval, { id }, { identity: identityOf(automation), timeoutMs })
      next = approvalOutcome(id, approval)
    }
    if (next.kind === 'waiting') {
      await store.stillWaiting(run, Date.now() + pollMs)
      return
    }
    if (next.kind === 'skipped') {
      await store.skipRun(run, next.reason)
      log.info({ ...context, reason: next.reason }, 'automation run not made: its approval was not given')
      // a limit or stop order still at its price would ask again at its next check: it waits for its owner instead
      if (automation.type === 'limit-order' || isTrigger(automation.type)) {
        await store.pauseFor(automation.id, `paused: its sale was not approved (${next.reason}); resume it to watch again`)
      }
      return
    }
    await store.finishRun(run, next.outcome, settings.AUTOMATION_MAX_FAILURES)
    log.info({ ...context, ok: next.outcome.ok, hash: next.outcome.txHash }, 'automation run finished after its approval')
  }

  return startWorkerLoop({
    name: 'approval watch',
    log,
    idleMs: pollMs,
    async round() {
      // held past one answer's timeout: a look that fails is retried by any replica after it
      const waiting = await store.claimWaiting(batch, timeoutMs + pollMs)
      await Promise.all(
        waiting.map((run) =>
          look(run).catch((error) =>
            log.warn({ err: error, runId: run.id, approvalId: run.approvalId }, 'approval of a waiting run not read; asked again later'),
          ),
        ),
      )
      return waiting.length === batch
    },
  })
}
