// The scheduler: every tick it claims due work (store.claim: one scheduler per row, however many
// replicas run) and executes it. A run swaps through the trading service over NATS with the
// idempotency key `automation-run:<runId>`, so a run resumed after its scheduler died, or
// repeated after a timeout, never swaps twice. While an admin has paused the server wallet (the kill
// switch, watched into memory) due runs are recorded as skipped and nothing is asked of trading.
// A swap over the key's approvalAboveUsd is not sent: the run waits for the approval (approvals.ts).
// Limit orders and stop orders are checks: a quote (limit order) or market-data's price (stop
// orders, orders.ts) decides whether the one sale starts now. A TWAP slice is quoted first and
// skipped (its amount carried or dropped) when its price impact is over the order's limit.
import { formatUnits } from 'viem'
import { isAwaitingApproval, type Approval, type NatsChannels, type TradingTokens, type TriggerType } from '@ats/contracts'
import { callEndpoint, IdempotencyInProgress, ServiceCallError, startWorkerLoop, type Logger, type ServiceConfig } from '@ats/service-kit'
import { pauseMessage, type WalletControlWatch } from '@ats/wallet'
import type { NatsConnection } from 'nats'
import type { Automation, AutomationRun } from '../generated/prisma/client.ts'
import { withdrawApproval } from './approvals.ts'
import { watching, watchStop, type StopState } from '../automations/orders.ts'
import type { PriceOf } from '../automations/prices.ts'
import { identityOf, swapOutcome, type Claimed, type Store } from '../automations/store.ts'
import type { Config, LimitOrder, StopOrder, Twap } from '../automations/types.ts'
import type { automationSettings } from '../settings.ts'

export interface SchedulerDeps {
  nc: NatsConnection
  channels: NatsChannels
  store: Store
  log: Logger
  settings: ServiceConfig<typeof automationSettings>
  tokens: TradingTokens
  /** the server wallet's kill switch */
  walletControl: Pick<WalletControlWatch, 'state'>
  priceOf: PriceOf
}

const percent = (bps: number) => `${bps / 100}%`

const inProgressMessage = new IdempotencyInProgress().message

/**
 * Whether trading refused an execute because the run's swap is still being made under its key
 * (409): an earlier attempt of the same run (a scheduler that lost its lease while paused or cut
 * off) is still in trading. Not a failure: the same key picks up its result once it ends.
 */
export function swapStillInFlight(error: unknown): boolean {
  return error instanceof ServiceCallError && error.statusCode === 409 && error.message === inProgressMessage
}

export function startScheduler({ nc, channels, store, log, settings, tokens, walletControl, priceOf }: SchedulerDeps) {
  const { AUTOMATION_EXECUTE_TIMEOUT_MS: executeTimeoutMs, AUTOMATION_MAX_FAILURES: maxFailures, AUTOMATION_LEASE_MS: leaseMs } = settings
  const inFlight = new Set<Promise<void>>()

  /** Why nothing may be spent now, or undefined. */
  const paused = () => {
    const state = walletControl.state()
    return state?.paused ? pauseMessage(state) : undefined
  }

  async function skip(run: AutomationRun, automation: Automation, reason: string) {
    await store.skipRun(run, `skipped: ${reason}`)
    log.warn({ automationId: automation.id, runId: run.id, reason }, 'automation run skipped')
  }

  /** trading holds the swap for a person: the run waits; if the run is gone (automation deleted meanwhile), the approval is given up. */
  async function wait(run: AutomationRun, automation: Automation, approval: Approval) {
    const context = { automationId: automation.id, runId: run.id, approvalId: approval.id }
    if (await store.awaitApproval(run, approval, Date.now() + settings.APPROVAL_POLL_MS)) {
      log.info(context, 'automation run waits for approval')
      return
    }
    await withdrawApproval({ nc, channels }, automation, approval.id, 'automation deleted', executeTimeoutMs).catch((error) =>
      log.warn({ ...context, err: error }, 'approval of a deleted automation not withdrawn; it stays pending until it expires'),
    )
  }

  /**
   * A run on the wallet's own tokens its grant cannot pay: this period's amount used up (409), the
   * run is skipped and the next goes on; no grant, or one revoked or expired (403), the run is
   * skipped and the automation paused until its owner resumes it (a new grant made).
   */
  async function grantRefused(run: AutomationRun, automation: Automation, status: number, message: string) {
    await skip(run, automation, message)
    if (status === 403) {
      await store.pauseFor(automation.id, `paused: ${message}`)
      log.warn({ automationId: automation.id, reason: message }, 'automation paused: its grant cannot pay')
    }
  }

  /** What trading's quote gives for `amountIn` of the order's tokenIn. */
  const quoteFor = (order: Config, amountIn: string) =>
    callEndpoint(
      nc,
      channels.trading.quote,
      { tokenIn: order.tokenIn, tokenOut: order.tokenOut, amountIn },
      { timeoutMs: executeTimeoutMs },
    )

  /** Why a TWAP slice is not swapped now: its quote's price impact over the order's limit; undefined to go on. */
  async function sliceRefusal(run: AutomationRun, order: Twap) {
    const quote = await quoteFor(order, run.amountIn)
    if (quote.priceImpactBps <= order.maxImpactBps) return undefined
    const next = order.remainder === 'carry' ? 'its amount carries into the next slice' : 'its amount is dropped'
    return `price impact ${percent(quote.priceImpactBps)} over the TWAP's limit of ${percent(order.maxImpactBps)}: ${next}`
  }

  async function execute(run: AutomationRun, automation: Automation) {
    const config = automation.config as unknown as Config
    // a resumed run may have a swap under way: trading answers it (or 423 when nothing was sent)
    const pausedNow = run.attempts === 1 ? paused() : undefined
    if (pausedNow) return skip(run, automation, pausedNow)
    try {
      const refused = automation.type === 'twap' && run.attempts === 1 ? await sliceRefusal(run, config as Twap) : undefined
      if (refused) return skip(run, automation, refused)
      const result = await callEndpoint(
        nc,
        channels.trading.execute,
        {
          tokenIn: config.tokenIn,
          tokenOut: config.tokenOut,
          amountIn: run.amountIn,
          slippageBps: config.slippageBps,
          // a wallet's own tokens, under its grant, pay out to it; else the server wallet pays and sends it there
          ...(automation.source === 'wallet' ? { from: automation.walletAddress } : { recipient: automation.walletAddress }),
          idempotencyKey: `automation-run:${run.id}`,
          automationRunId: run.id,
        },
        { identity: identityOf(automation), requestId: run.id, timeoutMs: executeTimeoutMs },
      )
      if (isAwaitingApproval(result)) return wait(run, automation, result.approval)
      await store.finishRun(run, swapOutcome(result, 'the swap reverted on chain'), maxFailures)
      log.info(
        { automationId: automation.id, runId: run.id, hash: result.hash, success: result.success, amountOut: result.amountOut },
        'automation run finished',
      )
    } catch (error) {
      const status = error instanceof ServiceCallError ? error.statusCode : undefined
      const inFlight = swapStillInFlight(error)
      // paused between our check and trading's
      if (status === 423) return skip(run, automation, (error as Error).message)
      if (automation.source === 'wallet' && !inFlight && (status === 409 || status === 403))
        return grantRefused(run, automation, status, (error as Error).message)
      // a slice over the key's price-impact ceiling, or one the pools would revert: recorded, not failed
      if (automation.type === 'twap' && status === 422) return skip(run, automation, (error as Error).message)
      // no answer in time, trading unavailable, or the swap still being made by an earlier attempt:
      // it may still be mined; the same key picks it up after the lease
      const retry =
        (status === 503 || status === 504 || status === undefined || inFlight) && run.attempts < settings.AUTOMATION_MAX_ATTEMPTS
      if (retry) {
        log.warn(
          { err: error, automationId: automation.id, runId: run.id, attempt: run.attempts },
          'automation run not finished; it is resumed after its lease',
        )
        return
      }
      const message = error instanceof ServiceCallError ? error.message : 'the swap could not be made'
      if (!(error instanceof ServiceCallError)) log.error({ err: error, runId: run.id }, 'automation run failed')
      await store.finishRun(run, { ok: false, error: message }, maxFailures)
      log.warn({ automationId: automation.id, runId: run.id, error: message }, 'automation run failed')
    }
  }

  /** A limit order: quote it; below its minAmountOut, note the quote and wait; at or above, fill it once. */
  async function check(automation: Automation, scheduledFor: Date) {
    const order = automation.config as unknown as LimitOrder
    let quoted: string
    try {
      quoted = (await quoteFor(order, order.amount)).amountOut
    } catch (error) {
      return store.checked(automation, `the last price check failed: ${(error as Error).message}`)
    }
    if (BigInt(quoted) < BigInt(order.minAmountOut)) {
      const out = await tokens.find(order.tokenOut)
      const shown = (v: string) => (out ? `${formatUnits(BigInt(v), out.decimals)} ${out.symbol}` : v)
      return store.checked(automation, `waiting: the last quote gave ${shown(quoted)}, below ${shown(order.minAmountOut)}`)
    }
    const run = await store.startFill(automation, scheduledFor, leaseMs)
    if (!run) return store.checked(automation, 'a fill is under way')
    log.info({ automationId: automation.id, runId: run.id, quoted }, 'limit order reached its price: filling')
    await execute(run, automation)
  }

  /** A stop order: its token's price now against its levels (a trailing stop's follows the highest); a crossed level starts its one sale. */
  async function watch(automation: Automation, scheduledFor: Date) {
    const order = automation.config as unknown as StopOrder
    const seen = await priceOf(order.tokenIn)
    if ('none' in seen) return store.checked(automation, `waiting: ${seen.none}; a missing or stale price never fires`)
    const { state, fired } = watchStop(automation.type as TriggerType, order, automation.state as StopState | null, seen)
    if (!fired) return store.checked(automation, watching(order, state, seen.asset), state)
    // the next check comes after this sale ends (a run under way holds the order): at once if it failed
    await store.checked(automation, fired.detail, state)
    const run = await store.startFill(automation, scheduledFor, leaseMs, fired)
    if (!run) return
    log.info({ automationId: automation.id, runId: run.id, trigger: fired.detail }, 'stop order fired: selling')
    await execute(run, automation)
  }

  async function perform(work: Claimed) {
    if (work.kind === 'run') return execute(work.run, work.automation)
    const { automation, scheduledFor } = work
    const limitOrder = automation.type === 'limit-order'
    // while the wallet is paused a check only notes it: nothing is quoted, watched or sold
    const pausedNow = paused()
    if (pausedNow)
      return store.checked(automation, `not ${limitOrder ? 'filled' : 'watched'} while ${pausedNow.replace(/; an admin .*$/, '')}`)
    return limitOrder ? check(automation, scheduledFor) : watch(automation, scheduledFor)
  }

  const loop = startWorkerLoop({
    name: 'automation scheduler',
    log,
    idleMs: settings.AUTOMATION_TICK_MS,
    async round() {
      // the kill switch cannot be read: runs wait, as if the scheduler were down (they are due once it is back)
      if (!walletControl.state()) return false
      const claimed = await store.claim(settings.AUTOMATION_BATCH, leaseMs)
      for (const work of claimed) {
        // runs go on beside the next ticks; a slow swap does not hold the others back
        const task = perform(work)
          .catch((error) => log.error({ err: error }, 'automation work failed'))
          .finally(() => inFlight.delete(task))
        inFlight.add(task)
      }
      return claimed.length === settings.AUTOMATION_BATCH
    },
  })

  return {
    async stop() {
      await loop.stop()
      // what is under way finishes (or is resumed by another scheduler after its lease)
      await Promise.allSettled([...inFlight])
    },
  }
}
