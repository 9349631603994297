import { adminRoutes } from '@ats/contracts'
import type { TypeBoxTypeProvider } from '@ats/service-kit'
import type { FastifyInstance } from 'fastify'
import { formatUnits } from 'viem'
import type { Ledger } from '../payments/ledger.ts'

/** USDC base units (6 decimals) as dollars, for people: 10000n -> "$0.01", 1234567n -> "$1.234567", 0n -> "$0.00". */
function formatUsd(baseUnits: bigint): string {
  const [whole, fraction = ''] = formatUnits(baseUnits < 0n ? -baseUnits : baseUnits, 6).split('.')
  return `${baseUnits < 0n ? '-' : ''}$${whole}.${fraction.padEnd(2, '0')}`
}

export interface RevenueOptions {
  ledger: Ledger
  /** PAYMENT_PRICE, USDC base units */
  price: bigint
  storage: string
}

export async function revenueRoutes(app: FastifyInstance, { ledger, price, storage }: RevenueOptions) {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()

  api.route({
    ...adminRoutes.revenue,
    handler: async () => {
      const [totals, recent] = await Promise.all([ledger.totals(), ledger.recent(20)])
      return {
        totalUsdc: totals.totalUsdc.toString(),
        totalUsd: formatUsd(totals.totalUsdc),
        uniquePayers: totals.uniquePayers,
        pricePerRequest: formatUsd(price),
        requestCount: totals.requestCount,
        voided: { count: totals.voided.count, totalUsdc: totals.voided.totalUsdc.toString() },
        recentPayments: recent.map((p) => ({
          payer: p.payer,
          amount: p.amount.toString(),
          route: `${p.method} ${p.route}`,
          paidAt: p.chargedAt.getTime(),
          requestId: p.requestId,
          // a job's payment held until its job ends is, to the reader, pending
          settlement: p.state === 'held' ? ('pending' as const) : p.state,
          txHash: p.txHash,
          settleError: p.settleError,
          jobId: p.jobId,
          voidReason: p.voidReason,
        })),
        storage,
        settlements: Object.fromEntries(
          Object.entries(totals.settlements).map(([state, c]) => [state, { count: c.count, totalUsdc: c.totalUsdc.toString() }]),
        ) as Record<keyof typeof totals.settlements, { count: number; totalUsdc: string }>,
        backlog: {
          count: totals.backlog.count,
          oldestPaidAt: totals.backlog.oldestPaidAt?.getTime() ?? null,
          lagMs: totals.backlog.oldestPaidAt ? Math.max(0, Date.now() - totals.backlog.oldestPaidAt.getTime()) : 0,
        },
      }
    },
  })

  api.route({
    ...adminRoutes.revenueHistory,
    handler: async (request) => {
      const { days } = request.query
      const history = await ledger.history(days)
      return {
        days,
        history: history.map((d) => ({
          date: d.date,
          count: d.count,
          totalUsdc: d.totalUsdc.toString(),
          totalUsd: formatUsd(d.totalUsdc),
        })),
      }
    },
  })
}
