// The job workers: pull jobs from the work queue, claim them in the database, run the agent
// runner with a signal that cancellation, the run-time limit and shutdown abort, and store
// the outcome. Run inside the agent service (AGENT_ROLE=all) or as worker processes (worker).
import { randomBytes } from 'node:crypto'
import type { AgentChannels, JobEvent, JobResult } from '@ats/contracts'
import { startWorkQueueConsumer, subscribe, type Logger, type WorkOutcome } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import { createCreditMeter, type CreditMeter } from '../credit/meter.ts'
import type { Prices } from '../credit/prices.ts'
import type { Job } from '../generated/prisma/client.ts'
import { createPlanner } from '../runner/planner.ts'
import { RunnerError, type Runner } from '../runner/runner.ts'
import { createToolbox } from '../runner/toolbox.ts'
import type { ApprovalWaits } from '../runner/approvals.ts'
import type { JobOwner, Tools } from '../runner/tools.ts'
import type { ApprovalWithdrawal } from './approvals.ts'
import type { JobEvents } from './events.ts'
import { deadlineOf, notStartedReason, stoppedReason } from './paymentDeadline.ts'
import { defaultModel, type CreditCharge, type Ended, type HistoryMessage, type JobStore } from './store.ts'

/** From the AGENT_* settings (service.ts maps them; settings.ts says what each is). */
export interface WorkerSettings {
  concurrency: number
  ackWaitMs: number
  maxAttempts: number
  maxRunMs: number
  historyMessages: number
  paymentMarginSeconds: number
}

export interface WorkerDeps {
  nc: NatsConnection
  channels: AgentChannels
  store: JobStore
  events: JobEvents
  tools: Tools
  runner: Runner
  /** gives up the approval of a job that failed while it waited */
  withdraw: ApprovalWithdrawal
  /** what work paid by credit costs */
  prices: Prices
  log: Logger
  settings: WorkerSettings
}

/** Why a run was aborted; each ends the job differently. */
class Cancelled extends Error {}
class TimedOut extends Error {}
class Stopping extends Error {}
/** The job's payment can no longer be settled after it: the job is voided with this message. */
class PaymentLapsed extends Error {}

/** setTimeout's longest delay; a deadline further away than this (weeks) is not timed */
const longestTimer = 2_147_483_647

export const ownerOfJob = (job: Job): JobOwner =>
  job.keyId ? { kind: 'key', keyId: job.keyId, wallet: job.wallet ?? undefined } : { kind: 'payer', address: job.ownerId }

/**
 * The run-time limit of a job: it aborts the run after `limitMs` of running, a wait for approval
 * not counted (a person may take minutes to decide).
 */
function runClock(limitMs: number, onLimit: () => void) {
  let left = limitMs
  let since = Date.now()
  let timer: NodeJS.Timeout | undefined = setTimeout(onLimit, left)
  return {
    pause() {
      if (!timer) return
      clearTimeout(timer)
      timer = undefined
      left -= Date.now() - since
    },
    resume() {
      if (timer) return
      since = Date.now()
      timer = setTimeout(onLimit, Math.max(0, left))
    },
    stop: () => clearTimeout(timer),
  }
}

export async function startJobWorkers({ nc, channels, store, events, tools, runner, withdraw, prices, log, settings }: WorkerDeps) {
  const workerId = `wrk_${randomBytes(8).toString('base64url')}`
  // /v1's ats-planner asks for the offline planner whatever the deployment's runner is
  const planner = runner.name === 'offline-planner' ? runner : createPlanner()
  const runnerFor = (job: Job) => (job.model === 'ats-planner' ? planner : runner)
  const running = new Map<string, AbortController>()

  // cancellations reach the job's worker at once; a missed broadcast is caught by the lease renewal
  const unsubscribe = subscribe(nc, channels.cancelled, log, ({ jobId }) => running.get(jobId)?.abort(new Cancelled()))

  async function run(
    job: Job,
    history: HistoryMessage[],
    signal: AbortSignal,
    approvals: ApprovalWaits,
    meter: CreditMeter | undefined,
  ): Promise<JobResult> {
    const owner = ownerOfJob(job)
    const toolbox = await createToolbox({
      tools,
      store,
      emit: events.emit,
      log,
      jobId: job.id,
      owner,
      signal,
      approvals,
      firstRun: job.attempts === 1,
    })
    meter?.countToolCalls(() => toolbox.toolCalls.length)
    // the text as the model writes it: broadcast only (never stored), each piece with its offset in the answer
    let offset = 0
    const onText = (text: string) => {
      events.emitDelta(job.id, text, offset)
      offset += text.length
      meter?.onText(text)
    }
    const input = {
      jobId: job.id,
      prompt: job.prompt,
      history,
      context: job.context ?? undefined,
      instructions: job.instructions ?? undefined,
      owner,
      onText,
      ...(meter ? { onUsage: meter.onUsage, budget: meter.budget } : {}),
    }
    const { text, modelTurns, usage } = await runnerFor(job).run(input, toolbox, signal)
    return { text, steps: toolbox.toolCalls.length + modelTurns, toolCalls: toolbox.toolCalls, transactions: toolbox.transactions, usage }
  }

  /** A credit-paid job cancelled while it ran: what it did until then is kept from its hold. */
  async function countCancelled(jobId: string, charge: CreditCharge) {
    if (await store.countCancelled(jobId, charge))
      log.info({ jobId, charged: String(charge.amount) }, 'credit of a job cancelled while running: its work counted')
  }

  /** After a job ended (when it did): its status event, and the approval it waited for withdrawn, saying `why`. */
  async function afterEnd(ended: Ended | null, why: string) {
    if (ended) events.emit(ended.event)
    if (ended?.approvalId) await withdraw(ended.owner, ended.approvalId, why)
  }

  /** A paid job taken after its deadline: failed without running, its payment voided with the reason. */
  async function voidLate(jobId: string, startBy: number, validBefore: bigint): Promise<WorkOutcome> {
    const ended = await store.voidLate(jobId, workerId, startBy, notStartedReason(validBefore, settings.paymentMarginSeconds))
    // taken or ended meanwhile: the next delivery sees how
    if (!ended) return { retryInMs: 1_000 }
    await afterEnd(ended, 'the job was voided: its payment could no longer be settled')
    log.warn({ jobId, validBefore: String(validBefore) }, 'paid job not started: its payment could no longer be settled after it')
    return 'done'
  }

  async function handle(jobId: string, deliveries: number, shutdown: AbortSignal): Promise<WorkOutcome> {
    // a paid job starts only with its deadline (validBefore less the margin) still ahead
    const startBy = Math.floor(Date.now() / 1000) + settings.paymentMarginSeconds
    const claim = await store.claim(jobId, workerId, { leaseMs: settings.ackWaitMs, historyMessages: settings.historyMessages, startBy })
    if ('finished' in claim) return 'done'
    if ('busyForMs' in claim) return { retryInMs: claim.busyForMs }
    if ('late' in claim) return voidLate(jobId, startBy, claim.late)
    events.emit(claim.event)
    const job = claim.claimed
    const deadline = deadlineOf(job.paymentValidBefore, settings.paymentMarginSeconds)
    const lapsed = () => new PaymentLapsed(stoppedReason(job.paymentValidBefore!, settings.paymentMarginSeconds))
    const meter = job.creditHoldAmount === null ? undefined : createCreditMeter(prices, job.model ?? defaultModel, job.creditHoldAmount)
    const controller = new AbortController()
    running.set(jobId, controller)
    const stop = () => controller.abort(new Stopping())
    shutdown.addEventListener('abort', stop, { once: true })
    if (shutdown.aborted) stop() // the process began to stop while the job was being claimed
    const overTime = `the job ran longer than its limit of ${Math.round(settings.maxRunMs / 1000)} s and was stopped`
    const clock = runClock(settings.maxRunMs, () => controller.abort(new TimedOut(overTime)))
    // at its deadline a paid job is stopped, running or waiting for an approval: its payment could no longer be settled
    const untilDeadline = (deadline ?? Number.POSITIVE_INFINITY) - Date.now()
    const lapse = untilDeadline > longestTimer ? undefined : setTimeout(() => controller.abort(lapsed()), Math.max(0, untilDeadline))
    /** the status event of a wait's start or end; none: the job is no longer this worker's (cancelled) */
    const emitOrCancel = (event: JobEvent | null) => {
      if (!event) {
        controller.abort(new Cancelled())
        throw controller.signal.reason
      }
      events.emit(event)
    }
    // a swap waiting for a person: the job shows it (status, SSE, /v1), and its time limit waits too
    const approvals: ApprovalWaits = {
      // trading caps the approval's expiry at the job's deadline
      decideBy: deadline,
      async begin(approval, notice) {
        emitOrCancel(await store.awaitApproval(jobId, workerId, approval, notice))
        clock.pause()
        log.info({ jobId, approvalId: approval.id }, 'job awaiting approval')
      },
      async end() {
        // never resumed past its deadline, whatever the decision
        if (deadline !== undefined && Date.now() >= deadline) controller.abort(lapsed())
        controller.signal.throwIfAborted()
        emitOrCancel(await store.resume(jobId, workerId))
        clock.resume()
      },
    }
    const renewal = setInterval(
      async () => {
        try {
          if (!(await store.renew(jobId, workerId, settings.ackWaitMs))) controller.abort(new Cancelled())
        } catch (error) {
          log.warn({ err: error, jobId }, 'job lease not renewed')
        }
      },
      Math.max(100, Math.floor(settings.ackWaitMs / 3)),
    )
    const started = Date.now()
    log.info({ jobId, deliveries, runner: runnerFor(job).name }, 'job running')
    try {
      const ran = await run(job, claim.history, controller.signal, approvals, meter)
      // paid by credit: the work done, at most the hold, shown in the result and kept from the hold
      const charge = meter?.completed(ran.usage, ran.steps)
      const result = charge ? { ...ran, charged: String(charge.amount) } : ran
      const ended = await store.complete(job, workerId, result, charge)
      if (!ended && charge) await countCancelled(jobId, charge)
      await afterEnd(ended, 'the job finished without this swap')
      log.info({ jobId, ms: Date.now() - started, steps: result.steps, toolCalls: result.toolCalls, cancelled: !ended }, 'job finished')
      return 'done'
    } catch (error) {
      const reason = controller.signal.aborted ? controller.signal.reason : error
      if (reason instanceof Cancelled) {
        if (meter) await countCancelled(jobId, await meter.cancelled())
        log.info({ jobId, ms: Date.now() - started }, 'job cancelled while running')
        return 'done'
      }
      if (reason instanceof Stopping) {
        await store.release(jobId, workerId)
        log.info({ jobId }, 'worker stopping: job handed back to the queue')
        // a new message, not a nak: the stop is not the job's attempt (rolling restarts would use them up)
        return 'handBack'
      }
      if (!(reason instanceof TimedOut || reason instanceof RunnerError || reason instanceof PaymentLapsed)) {
        // our own fault (a database or NATS error): another run may succeed
        await store.release(jobId, workerId).catch(() => undefined)
        throw error
      }
      const { message } = reason
      const why = reason instanceof PaymentLapsed ? 'the job was voided: its payment could no longer be settled' : 'the job failed'
      await afterEnd(await store.fail(jobId, workerId, message), why)
      log.warn({ jobId, ms: Date.now() - started, error: message }, 'job failed')
      return 'done'
    } finally {
      clock.stop()
      clearTimeout(lapse)
      clearInterval(renewal)
      shutdown.removeEventListener('abort', stop)
      running.delete(jobId)
    }
  }

  const consumer = await startWorkQueueConsumer({
    nc,
    log,
    stream: channels.jobsStream,
    durable: channels.workers,
    topic: channels.jobs,
    concurrency: settings.concurrency,
    ackWaitMs: settings.ackWaitMs,
    maxDeliveries: settings.maxAttempts,
    handle: ({ message, deliveries, shutdown }) => handle(message.jobId, deliveries, shutdown),
    exhausted: async ({ jobId }, deliveries) => {
      const message = `the job could not be completed: it was started ${deliveries - 1} times and its worker stopped or failed each time`
      await afterEnd(await store.fail(jobId, null, message), 'the job failed')
      log.error({ jobId, deliveries }, 'job failed: out of attempts')
    },
  })
  log.info({ workerId, concurrency: settings.concurrency, runner: runner.name }, 'job workers started')

  return {
    workerId,
    async stop() {
      await consumer.stop()
      unsubscribe()
    },
  }
}
