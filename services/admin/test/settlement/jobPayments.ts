import { randomBytes } from 'node:crypto'
import { eip3009Abi } from '@ats/chain'
import { natsChannels, type JobPaymentOutcome, type PaymentCharged } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import t from 'tap'
import type { Hex } from 'viem'
import type { PrivateKeyAccount } from 'viem/accounts'
import { eventually, freshAddress, signCharge, startSettlingAdmin, type RecentPayment } from '../helpers.ts'

/**
 * Payments of agent jobs (POST /agent/prompt): recorded held, settled only once the agent says
 * the job completed (charge), voided when it failed or was cancelled before it started (void),
 * or when the authorization expires first. On the devnet, with the real settler.
 */
t.test('payments held for their job: charge settles, void and expiry never do', async (top) => {
  const admin = await startSettlingAdmin(top)
  const { chain } = admin
  const js = admin.nc.jetstream()
  const { paymentsOfJobs } = natsChannels(admin.env.NATS_NAMESPACE!).admin
  const newJob = () => `job_${randomBytes(12).toString('base64url')}`

  /** a charge for POST /agent/prompt that bought `jobId`, as the gateway publishes it */
  const jobCharge = async (
    payer: PrivateKeyAccount,
    jobId: string,
    overrides: Parameters<typeof signCharge>[2] = {},
  ): Promise<PaymentCharged> => ({
    ...(await signCharge(chain.usdc, payer, { route: '/agent/prompt', ...overrides })),
    method: 'POST',
    jobId,
    settle: 'on-job-complete',
  })
  /** the agent's verdict on a job's payment */
  const outcome = (charge: PaymentCharged, verdict: Pick<JobPaymentOutcome, 'outcome' | 'status' | 'reason'>) => {
    const message: JobPaymentOutcome = {
      jobId: charge.jobId!,
      payer: charge.payer.toLowerCase(),
      nonce: charge.authorization.nonce,
      at: Date.now(),
      ...verdict,
    }
    return js.publish(admin.payments.jobOutcome.subject, admin.payments.jobOutcome.message.encode(message), { msgID: message.jobId })
  }
  const paymentOf = async (requestId: string) => (await admin.revenue()).recentPayments.find((p) => p.requestId === requestId)
  const whenPayment = (what: string, requestId: string, done: (p: RecentPayment) => boolean, timeoutMs?: number) =>
    eventually(
      what,
      async () => {
        const p = await paymentOf(requestId)
        return p && done(p) ? p : undefined
      },
      timeoutMs,
    )
  const ofJobs = (jobIds: string[]) => callEndpoint(admin.nc, paymentsOfJobs, { jobIds })
  const unused = async (charge: PaymentCharged) =>
    !(await chain.publicClient.readContract({
      address: chain.usdc,
      abi: eip3009Abi,
      functionName: 'authorizationState',
      args: [charge.payer as Hex, charge.authorization.nonce as Hex],
    }))

  top.test('held -> pending -> settled: a job payment waits for its job while other payments settle at once', async (t) => {
    const payer = await chain.fundedPayer(1_000_000n)
    const payTo = freshAddress()
    const held = await jobCharge(payer, newJob(), { payTo })
    const other = await signCharge(chain.usdc, payer, { payTo })
    await admin.publish([held, other])

    await whenPayment('the other payment settled', other.requestId, (p) => p.settlement === 'settled')
    t.match(
      await paymentOf(held.requestId),
      { settlement: 'pending', jobId: held.jobId, txHash: null, voidReason: null, route: 'POST /agent/prompt' },
      'held: shown pending',
    )
    t.equal(await chain.balanceOf(payTo), 10_000n, 'only the other payment moved USDC')
    t.same(await ofJobs([held.jobId!]), { payments: { [held.jobId!]: { state: 'pending' } } })

    await outcome(held, { outcome: 'charge', status: 'complete' })
    const settled = await whenPayment('the job payment settled', held.requestId, (p) => p.settlement === 'settled')
    t.match(settled, { txHash: /^0x[0-9a-f]{64}$/, voidReason: null })
    t.equal(await chain.balanceOf(payTo), 20_000n, 'the job payment moved USDC once its job completed')
    t.same(await ofJobs([held.jobId!]), { payments: { [held.jobId!]: { state: 'settled', txHash: settled.txHash } } })
  })

  top.test('held -> voided: a failed job never settles; revenue leaves it out and shows it apart', async (t) => {
    const payer = await chain.fundedPayer(1_000_000n)
    const payTo = freshAddress()
    const before = await admin.revenue()
    const counted = await admin.paymentsCounted()
    const charge = await jobCharge(payer, newJob(), { payTo, value: 30_000n })
    await admin.publish([charge])
    await whenPayment('recorded', charge.requestId, (p) => p.settlement === 'pending')
    const reason = 'the get_prices step failed: market-data answered 502'
    await outcome(charge, { outcome: 'void', status: 'failed', reason })

    const voided = await whenPayment('voided', charge.requestId, (p) => p.settlement === 'voided')
    t.match(voided, { voidReason: reason, txHash: null, settleError: null, jobId: charge.jobId })
    t.same(await ofJobs([charge.jobId!]), { payments: { [charge.jobId!]: { state: 'voided', reason } } })
    t.equal(await chain.balanceOf(payer.address), 1_000_000n, "the payer's USDC did not move")
    t.equal(await chain.balanceOf(payTo), 0n)
    t.ok(await unused(charge), 'the authorization was never used on chain')

    const after = await admin.revenue()
    t.equal(after.requestCount, before.requestCount, 'not counted as a paid request')
    t.equal(after.totalUsdc, before.totalUsdc, 'not in the total')
    t.same(
      after.voided,
      { count: (before.voided as any).count + 1, totalUsdc: String(BigInt((before.voided as any).totalUsdc) + 30_000n) },
      'shown apart',
    )
    t.match(await admin.paymentsCounted(), { charged: counted.charged! + 1, voided: counted.voided! + 1 }, 'charged and voided on /metrics')
    const history = await admin.call('GET', '/admin/revenue/history?days=1')
    t.equal(history.body.history[0].totalUsdc, after.totalUsdc, "the day's history leaves it out too")
  })

  top.test('an outcome that arrives before its payment is recorded still applies', async (t) => {
    const payer = await chain.fundedPayer(1_000_000n)
    const charge = await jobCharge(payer, newJob())
    await outcome(charge, { outcome: 'void', status: 'cancelled', reason: 'cancelled before it started' })
    // admin has stored it: the job is voided before any payment is recorded
    await eventually('the outcome stored', async () =>
      (await ofJobs([charge.jobId!])).payments[charge.jobId!]?.state === 'voided' ? true : undefined,
    )
    await admin.publish([charge])
    const voided = await whenPayment('voided', charge.requestId, (p) => p.settlement === 'voided')
    t.equal(voided.voidReason, 'cancelled before it started')
    t.ok(await unused(charge))

    const charged = await jobCharge(payer, newJob())
    await outcome(charged, { outcome: 'charge', status: 'cancelled' })
    await eventually('the charge outcome stored', async () => {
      const rows = await admin.nc
        .jetstreamManager()
        .then((jsm) => jsm.consumers.info(admin.payments.stream, admin.payments.jobOutcomeConsumer))
      return rows.num_pending === 0 && rows.num_ack_pending === 0 ? true : undefined
    })
    await admin.publish([charged])
    await whenPayment('a job cancelled while running settles', charged.requestId, (p) => p.settlement === 'settled')
  })

  top.test('a held payment whose authorization expires before its job finishes is voided', async (t) => {
    const payer = await chain.fundedPayer(1_000_000n)
    const now = BigInt(Math.floor(Date.now() / 1000))
    const charge = await jobCharge(payer, newJob(), { validBefore: now + 3n })
    await admin.publish([charge])
    const voided = await whenPayment('voided at expiry', charge.requestId, (p) => p.settlement === 'voided', 15_000)
    t.equal(voided.voidReason, 'authorization expired before the job finished')
    // the job completes after all: too late, nothing is settled
    await outcome(charge, { outcome: 'charge', status: 'complete' })
    t.same(await ofJobs([charge.jobId!]), {
      payments: { [charge.jobId!]: { state: 'voided', reason: 'authorization expired before the job finished' } },
    })
    t.equal((await paymentOf(charge.requestId))!.settlement, 'voided')
    t.equal(await chain.balanceOf(payer.address), 1_000_000n)
  })
})
