// What /metrics shows of swaps: ats_swaps_total, each swap from the server wallet by how it ended and how it came.
import { isAwaitingApproval, type AwaitingApproval, type SwapResult } from '@ats/contracts'
import { clientErrorStatus, type CounterMetric, type ServiceMetrics } from '@ats/service-kit'

/**
 * How a swap's execution ended: mined (success or reverted), held for a person's approval,
 * refused before anything was sent (a client error: spend policy, price impact, would revert,
 * wallet paused), or an error of ours (RPC, admin unreachable, a receipt not seen in time: it
 * may have been sent).
 */
export const swapOutcomes = ['success', 'reverted', 'held', 'refused', 'error'] as const
/** An API request, a NATS call (the agent, automations), or a held swap run once approved. */
export const swapPaths = ['http', 'nats', 'approval'] as const
export type SwapCounter = CounterMetric<{ outcome: typeof swapOutcomes; via: typeof swapPaths }>
export type SwapPath = (typeof swapPaths)[number]
export const swapCounter = (metrics: ServiceMetrics): SwapCounter =>
  metrics.counter({
    name: 'ats_swaps_total',
    help: 'swaps from the server wallet, by how they ended and how they came (replays not counted)',
    labels: { outcome: swapOutcomes, via: swapPaths },
  })

type Answer = SwapResult | AwaitingApproval

/** Counts how a try of a swap ended: replays never reach here, so each swap counts once. */
export async function countOutcome(counted: SwapCounter, via: SwapPath, run: () => Promise<Answer>): Promise<Answer> {
  try {
    const result = await run()
    counted.inc({ outcome: isAwaitingApproval(result) ? 'held' : result.success ? 'success' : 'reverted', via })
    return result
  } catch (error) {
    counted.inc({ outcome: clientErrorStatus(error) === undefined ? 'error' : 'refused', via })
    throw error
  }
}
