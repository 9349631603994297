import { blockedPayerCodec } from '@ats/contracts'
import Fastify from 'fastify'
import t from 'tap'
import type { Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { devnetUsdc, eventually, freshAddress, inState, signCharge, startAdmin, startSettlingAdmin } from './helpers.ts'
// Settlement when things go wrong, and payments held for their job, run in this process too, on
// the same devnet (one per process): each test file costs seconds of CPU to start, and its devnet
// more. Their tests register first (imports run before this module's body).
import './settlement/faults.ts'
import './settlement/jobPayments.ts'

const day = 86_400_000

t.test('a settled payment moves its USDC from payer to payTo on chain, and its tx hash is in the ledger', async (t) => {
  const admin = await startSettlingAdmin(t)
  const { chain } = admin
  const payer = await chain.fundedPayer(1_000_000n)
  const payTo = freshAddress()
  await admin.publish([await signCharge(chain.usdc, payer, { payTo })])

  const [settled] = await admin.paymentsWhen('the payment settled', (payments) => payments.some(inState('settled')))
  t.match(settled, {
    payer: payer.address,
    amount: '10000',
    route: 'GET /agent/skills',
    settlement: 'settled',
    txHash: /^0x[0-9a-f]{64}$/,
    settleError: null,
  })
  const receipt = await chain.publicClient.getTransactionReceipt({ hash: settled!.txHash as Hex })
  t.match(receipt, { status: 'success', from: chain.serverWallet.toLowerCase() }, 'sent by the server wallet')
  t.equal(await chain.balanceOf(payer.address), 990_000n, 'the payer paid 10000 base units')
  t.equal(await chain.balanceOf(payTo), 10_000n, 'payTo received them')
})

t.test('payments of many payers settle together in few transactions from one server wallet, each exactly once', async (t) => {
  const admin = await startSettlingAdmin(t)
  const { chain } = admin
  const payers = [await chain.fundedPayer(1_000_000n), await chain.fundedPayer(1_000_000n), await chain.fundedPayer(1_000_000n)]
  const payTo = freshAddress()
  // three batches, as gateways send them: each holds one payment of every payer
  for (let i = 0; i < 3; i++) await admin.publish(await Promise.all(payers.map((payer) => signCharge(chain.usdc, payer, { payTo }))))

  const settled = await admin.paymentsWhen('9 payments settled', (payments) => payments.filter(inState('settled')).length === 9, 20_000)
  const hashes = new Set(settled.map((p) => p.txHash as Hex))
  t.ok(hashes.size <= 3, `${hashes.size} transactions for 9 payments: a payer's payments settle side by side, not one after another`)
  const receipts = await Promise.all([...hashes].map((hash) => chain.publicClient.getTransactionReceipt({ hash })))
  t.same(new Set(receipts.map((r) => r.from)), new Set([chain.serverWallet.toLowerCase()]), 'all from the server wallet')
  t.equal(await chain.balanceOf(payTo), 90_000n, 'payTo received every payment once')
  for (const payer of payers) t.equal(await chain.balanceOf(payer.address), 970_000n, `${payer.address} paid three times`)
  // a transaction's own 21,000 is shared by its payments: how many transactions the nine took
  // depends on timing (1-3), so the bound is the one three would keep; the bench shows ~39k at 100
  const gas = receipts.reduce((sum, r) => sum + r.gasUsed, 0n)
  t.ok(gas / 9n <= 55_000n, `${gas / 9n} gas per settled payment in ${hashes.size} transactions (one transaction each took 67,837)`)
})

t.test('a batch with one bad authorization settles the others in one transaction and reports the bad one', async (t) => {
  const admin = await startSettlingAdmin(t, { SETTLEMENT_MAX_ATTEMPTS: '1' })
  const { chain } = admin
  const payers = [await chain.fundedPayer(1_000_000n), await chain.fundedPayer(1_000_000n), await chain.fundedPayer(1_000_000n)]
  const payTo = freshAddress()
  const good = await Promise.all(payers.map((payer) => signCharge(chain.usdc, payer, { payTo })))
  // signed for 10000, recorded as 20000: the token refuses its signature
  const signed = await signCharge(chain.usdc, payers[0]!, { payTo })
  const bad = { ...signed, authorization: { ...signed.authorization, value: '20000' } }
  await admin.publish([...good, bad])

  const payments = await admin.paymentsWhen(
    'three settled, one failed',
    (payments) => payments.filter(inState('settled')).length === 3 && payments.some(inState('failed')),
  )
  const hashes = new Set(payments.filter(inState('settled')).map((p) => p.txHash))
  t.equal(hashes.size, 1, 'the good ones settled in one transaction')
  t.match(payments.find(inState('failed')), { requestId: bad.requestId, txHash: null, settleError: /EIP3009: invalid signature/ })
  t.equal(await chain.balanceOf(payTo), 30_000n, 'payTo received the three good payments')
  t.equal(await chain.balanceOf(payers[0]!.address), 990_000n, 'the payer of the bad one paid its good one only')
  t.same((await admin.call('GET', '/admin/payers/blocked')).body, { payers: [] }, 'nobody is blocked for a signature the token refused')
})

t.test('a batch delivered twice is recorded and settled once', async (t) => {
  const admin = await startSettlingAdmin(t)
  const { chain } = admin
  const payer = await chain.fundedPayer(1_000_000n)
  const payTo = freshAddress()
  const charges = [await signCharge(chain.usdc, payer, { payTo })]
  await admin.publish(charges)
  await admin.publish(charges)

  await admin.paymentsWhen('the payment settled', (payments) => payments.some(inState('settled')))
  await eventually('both deliveries consumed', async () => {
    const consumer = await admin.jsm.consumers.info(admin.payments.stream, admin.payments.ledgerConsumer)
    return consumer.delivered.stream_seq === 2 && consumer.num_pending === 0 && consumer.num_ack_pending === 0 ? true : undefined
  })
  t.match(await admin.revenue(), { requestCount: 1, totalUsdc: '10000' }, 'one payment in the ledger')
  t.equal(await chain.balanceOf(payTo), 10_000n, 'paid once')
  t.same(await admin.paymentsCounted(), { charged: 1, settled: 1, failed: 0, voided: 0 }, 'counted once on /metrics')
})

t.test('revenue counts payments by settlement, and the backlog waiting to settle with its lag', async (t) => {
  // settling, but looking for due payments only once an hour: what is recorded waits
  const admin = await startSettlingAdmin(t, { SETTLEMENT_INTERVAL_MS: '3600000' })
  const payer = await admin.chain.fundedPayer(1_000_000n)
  const chargedAt = Date.now() - 5_000
  await admin.publish([await signCharge(admin.chain.usdc, payer, { chargedAt }), await signCharge(admin.chain.usdc, payer)])
  const summary = await eventually('2 payments recorded', async () => {
    const body = await admin.revenue()
    return body.requestCount === 2 ? body : undefined
  })
  t.match(summary.settlements, {
    pending: { count: 2, totalUsdc: '20000' },
    settling: { count: 0, totalUsdc: '0' },
    settled: { count: 0, totalUsdc: '0' },
    failed: { count: 0, totalUsdc: '0' },
    skipped: { count: 0, totalUsdc: '0' },
    voided: { count: 0, totalUsdc: '0' },
  })
  t.equal(summary.backlog.count, 2, 'both wait to settle')
  t.equal(summary.backlog.oldestPaidAt, chargedAt, 'the oldest, by when it was charged')
  t.ok(summary.backlog.lagMs >= 5_000 && summary.backlog.lagMs < 60_000, `its lag (${summary.backlog.lagMs} ms)`)
})

t.test('revenue and its history count the recorded payments to the unit, by UTC day', async (t) => {
  const admin = await startAdmin(t, { SETTLEMENT_ENABLED: 'false' })
  const [first, second] = [privateKeyToAccount(generatePrivateKey()), privateKeyToAccount(generatePrivateKey())]
  // no chain here: the USDC address only goes into what the payers sign
  const usdc = freshAddress()
  const now = Date.now()
  await admin.publish([
    await signCharge(usdc, first, { chargedAt: now - 2 * day }),
    await signCharge(usdc, first, { chargedAt: now - 3_000 }),
    await signCharge(usdc, first, { chargedAt: now - 2_000 }),
  ])
  await admin.publish([await signCharge(usdc, second, { value: 25_000n, chargedAt: now - 1_000, route: '/agent/chat' })])

  const summary = await eventually('4 payments recorded', async () => {
    const body = await admin.revenue()
    return body.requestCount === 4 ? body : undefined
  })
  t.match(summary, {
    totalUsdc: '55000',
    totalUsd: '$0.055',
    uniquePayers: 2,
    pricePerRequest: '$0.01',
    requestCount: 4,
    storage: /postgres/,
  })
  t.same(
    summary.recentPayments.map((p) => [p.payer, p.amount, p.route]),
    [
      [second.address, '25000', 'GET /agent/chat'],
      [first.address, '10000', 'GET /agent/skills'],
      [first.address, '10000', 'GET /agent/skills'],
      [first.address, '10000', 'GET /agent/skills'],
    ],
    'newest first, each at the value paid',
  )
  t.ok(summary.recentPayments.every(inState('skipped')), 'SETTLEMENT_ENABLED=false records them as skipped')
  t.match(summary.settlements, { skipped: { count: 4, totalUsdc: '55000' }, pending: { count: 0 } }, 'by settlement')
  t.same(summary.backlog, { count: 0, oldestPaidAt: null, lagMs: 0 }, 'nothing waits to settle')

  const date = (ms: number) => new Date(ms).toISOString().slice(0, 10)
  const history = await admin.call('GET', '/admin/revenue/history')
  t.equal(history.status, 200)
  t.equal(history.body.days, 30)
  t.equal(history.body.history.length, 30, 'one entry per day, days without payments included')
  t.equal(history.body.history[0].date, date(now - 29 * day), 'oldest first')
  t.same(history.body.history.at(-1), { date: date(now), count: 3, totalUsdc: '45000', totalUsd: '$0.045' })
  t.same(history.body.history.at(-3), { date: date(now - 2 * day), count: 1, totalUsdc: '10000', totalUsd: '$0.01' })
  const quiet = history.body.history.filter((_: unknown, i: number) => i !== 29 && i !== 27)
  t.ok(
    quiet.every((d: { count: number; totalUsdc: string }) => d.count === 0 && d.totalUsdc === '0'),
    'the other days count 0',
  )

  const week = await admin.call('GET', '/admin/revenue/history?days=7')
  t.equal(week.body.history.length, 7)
  for (const days of ['91', '0', 'x']) {
    const bad = await admin.call('GET', `/admin/revenue/history?days=${days}`)
    t.equal(bad.status, 400, `days=${days}`)
    t.match(bad.body, { error: /querystring\/days/ })
  }
})

t.test('a payer whose payment fails to settle for lack of funds is blocked until an admin unblocks them', async (t) => {
  const admin = await startSettlingAdmin(t)
  const { chain } = admin
  const poor = await chain.fundedPayer(15_000n)
  const payTo = freshAddress()
  // each alone is covered by the 15000 the payer holds; both are not
  await admin.publish([await signCharge(chain.usdc, poor, { payTo }), await signCharge(chain.usdc, poor, { payTo })])

  const payments = await admin.paymentsWhen(
    'one settled, one failed',
    (payments) =>
      payments
        .map((p) => p.settlement)
        .sort()
        .join() === 'failed,settled',
  )
  const failed = payments.find(inState('failed'))!
  t.match(failed, {
    payer: poor.address,
    txHash: null,
    settleError: `insufficient funds: ${poor.address} holds 5000, the payment is 10000`,
  })
  t.equal(await chain.balanceOf(payTo), 10_000n, 'only the payment that settled moved USDC')
  t.match(await admin.revenue(), { totalUsdc: '10000', requestCount: 1, uniquePayers: 1 }, 'a payment that failed to settle earns nothing')
  t.same(await admin.paymentsCounted(), { charged: 2, settled: 1, failed: 1, voided: 0 }, 'both outcomes counted on /metrics')

  const entry = await admin.blockedPayers.get(poor.address.toLowerCase())
  t.match(
    entry && blockedPayerCodec.decode(entry.value),
    { reason: failed.settleError, since: Number },
    'the payer is in the bucket the gateways watch',
  )
  const blocked = await admin.call('GET', '/admin/payers/blocked')
  t.equal(blocked.status, 200)
  t.match(blocked.body, { payers: [{ payer: poor.address.toLowerCase(), reason: /^insufficient funds/, since: Number }] })
  t.equal(blocked.body.payers.length, 1)

  const unblocked = await admin.call('DELETE', `/admin/payers/blocked/${poor.address}`)
  t.same(unblocked.body, { ok: true, payer: poor.address.toLowerCase() })
  t.equal((await admin.blockedPayers.get(poor.address.toLowerCase()))?.operation, 'DEL', 'gone from the bucket')
  t.same((await admin.call('GET', '/admin/payers/blocked')).body, { payers: [] })
})

t.test(
  'with FACILITATOR_URL payments settle through its /settle, a 503 is retried, and a refusal is recorded and blocks the payer',
  async (t) => {
    const received: any[] = []
    const facilitator = Fastify()
    facilitator.post('/settle', async (request, reply) => {
      const body = request.body as any
      received.push(body)
      const payer = body.paymentPayload.payload.authorization.from
      // the first call meets a facilitator in trouble: a transient failure, retried
      if (received.length === 1) return reply.code(503).send({ error: 'try again' })
      if (received.length > 2)
        return { success: false, errorReason: 'insufficient_funds', transaction: '', network: body.paymentPayload.network, payer }
      return { success: true, transaction: `0x${'ab'.repeat(32)}`, network: body.paymentPayload.network, payer }
    })
    const url = await facilitator.listen({ port: 0, host: '127.0.0.1' })
    t.teardown(() => facilitator.close())
    // the facilitator settles: admin needs no server wallet; it reads the chain only to check a
    // refusal (these authorizations are unused there, so refusals stand)
    const { usdc, env } = await devnetUsdc()
    const admin = await startAdmin(t, {
      FACILITATOR_URL: url,
      SETTLEMENT_INTERVAL_MS: '100',
      SETTLEMENT_RETRY_MS: '100',
      RPC_URL: env.RPC_URL,
      CHAIN_ID: env.CHAIN_ID,
      ADDRESS_BOOK: env.ADDRESS_BOOK,
    })
    const payer = privateKeyToAccount(generatePrivateKey())
    const payTo = freshAddress()

    await admin.publish([await signCharge(usdc, payer, { payTo })])
    const [settled] = await admin.paymentsWhen('the payment settled', (payments) => payments.some(inState('settled')))
    t.match(settled, { settlement: 'settled', txHash: `0x${'ab'.repeat(32)}`, settleError: null })
    t.equal(received.length, 2, 'the 503 was retried')
    t.same(received[1], received[0], 'with the same request')
    t.match(received[0], {
      x402Version: 1,
      paymentPayload: {
        x402Version: 1,
        scheme: 'exact',
        network: 'eip155:31337',
        payload: { signature: /^0x[0-9a-f]{130}$/, authorization: { from: payer.address, to: payTo, value: '10000' } },
      },
      paymentRequirements: {
        scheme: 'exact',
        network: 'eip155:31337',
        maxAmountRequired: '10000',
        payTo,
        asset: usdc,
        extra: { name: 'USD Coin', version: '2' },
      },
    })

    await admin.publish([await signCharge(usdc, payer, { payTo })])
    const payments = await admin.paymentsWhen('the second payment refused', (payments) => payments.some(inState('failed')))
    t.match(payments.find(inState('failed')), { settleError: 'facilitator: insufficient_funds', txHash: null })
    t.equal(received.length, 3, 'a refusal is not retried')
    const blocked = await admin.call('GET', '/admin/payers/blocked')
    t.match(
      blocked.body,
      { payers: [{ payer: payer.address.toLowerCase(), reason: 'facilitator: insufficient_funds' }] },
      'the payer is blocked',
    )
  },
)
