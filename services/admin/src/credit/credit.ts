// Prepaid credit in admin: the ledger, its consumers, the sweep (top-ups, hold timeouts, withdrawals),
// the adjustment publisher, reconciliation, the snapshot and the routes, started together.
import { startWorkerLoop, type EventOutbox } from '@ats/service-kit'
import { watchWalletControl } from '@ats/wallet'
import type { FastifyInstance } from 'fastify'
import { creditRoutes } from '../routes/credit.ts'
import type { AdminContext } from '../service.ts'
import { startAdjustmentPublisher } from './adjustments.ts'
import { startDebitConsumer, startUsageConsumer } from './consumers.ts'
import { createCreditLedger } from './creditLedger.ts'
import { debitsRecorded } from './snapshot.ts'
import { createWithdrawals } from './withdrawals.ts'

/** Starts the credit ledger; answers the snapshot the NATS endpoint serves. */
export async function startCredit(
  app: FastifyInstance,
  { db, nc, channels, config, chain, log, metrics, onClose }: AdminContext,
  events: Pick<EventOutbox, 'send'>,
) {
  const credit = channels.admin.credit
  let wakePublisher = () => {}
  const ledger = createCreditLedger(db, { events, lowBalance: BigInt(config.CREDIT_LOW_BALANCE), onAdjusted: () => wakePublisher() })

  const debits = await startDebitConsumer(nc, credit, ledger, log, config.LEDGER_RETRY_MS)
  onClose(debits.stop)
  const usage = await startUsageConsumer(nc, credit, ledger, log, config.LEDGER_RETRY_MS)
  onClose(usage.stop)
  const publisher = startAdjustmentPublisher(db, nc, credit, log, config.CREDIT_SWEEP_MS)
  wakePublisher = publisher.wake
  onClose(publisher.stop)

  const caughtUp = debitsRecorded(await nc.jetstreamManager(), credit, config.CREDIT_SNAPSHOT_WAIT_MS)
  const walletControl = await watchWalletControl(nc, channels.admin.walletControl, log)
  onClose(() => walletControl.close())
  const withdrawals = createWithdrawals({ db, chain, ledger, walletControl, debitsRecorded: caughtUp, log, settings: config })

  const sweep = startWorkerLoop({
    name: 'credit-sweep',
    log,
    idleMs: config.CREDIT_SWEEP_MS,
    round: async () => {
      const credited = await ledger.creditTopUps()
      if (credited.length > 0)
        log.info({ topUps: credited.map((c) => ({ wallet: c.wallet, amount: String(c.amount) })) }, 'credit topped up')
      const { released, orphaned } = await ledger.expireHolds(config.CREDIT_HOLD_TIMEOUT_MS)
      if (released.length > 0) {
        log.warn(
          { holds: released.map((h) => ({ wallet: h.wallet, hold: h.id, amount: String(h.amount) })) },
          'credit holds without a usage report released in full (CREDIT_HOLD_TIMEOUT_MS)',
        )
      }
      if (orphaned.length > 0) log.warn({ reports: orphaned }, 'credit usage reports whose hold never came: set aside')
      if (chain.hasWallet) await withdrawals.resume()
      return false
    },
  })
  onClose(sweep.stop)

  let drifted = 0
  metrics.gauge({
    name: 'ats_credit_drifted_accounts',
    help: 'credit accounts whose balance or held differed from the sum of their ledger entries at the last reconciliation (0: none)',
    collect: (gauge) => gauge.set({}, drifted),
  })
  const reconciliation = startWorkerLoop({
    name: 'credit-reconciliation',
    log,
    idleMs: config.CREDIT_RECONCILE_MS,
    round: async () => {
      const drift = await ledger.drift()
      drifted = drift.length
      for (const d of drift) log.error(d, 'credit reconciliation: the account differs from the sum of its entries')
      return false
    },
  })
  onClose(reconciliation.stop)

  await app.register(creditRoutes, { ledger, withdrawals })

  return {
    /** admin.credit.snapshot: once every debit published before the request is recorded */
    async snapshot(wallet: string) {
      await caughtUp()
      const { available, entry } = await ledger.snapshot(wallet.toLowerCase())
      // below zero only if a copy was wrong (reconciliation reports it): nothing is spendable then
      return { wallet, available: String(available > 0n ? available : 0n), entry: String(entry) }
    },
  }
}
