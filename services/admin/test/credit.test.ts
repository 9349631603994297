import { identityHeaders } from '@ats/contracts'
import { scrapeMetric, testInternalToken } from '@ats/service-kit/testing'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { startCreditAdmin } from './creditHelpers.ts'
import { eventually } from './helpers.ts'

/**
 * The credit ledger in admin (no chain): top-ups credited once their payment settles, debits and
 * holds recorded once, usage reports closing holds, the hold timeout, low-balance events, the
 * snapshot gateways rebuild from, who may read which wallet, and reconciliation.
 */

const payer = () => privateKeyToAccount(generatePrivateKey())
const usdc = (dollars: number) => BigInt(Math.round(dollars * 1_000_000))

t.test('a top-up is pending until its payment settles, then credited once, announced and sent to the gateways', async (t) => {
  const admin = await startCreditAdmin(t)
  const p = payer()
  const wallet = p.address.toLowerCase()
  const { answer, nonce, settle } = await admin.topUp(p, usdc(2))
  t.equal(answer.status, 202)
  t.same(answer.body, { wallet, amount: '2000000', state: 'pending', nonce })

  const before = await admin.account(wallet)
  t.match(before, { available: '0', balance: '0', pendingTopUps: [{ amount: '2000000', nonce }] }, 'pending: shown, not spendable')

  await settle()
  const after = await admin.availableBecomes(wallet, usdc(2), 'the settled top-up credited')
  t.match(after, { balance: '2000000', held: '0', pendingTopUps: [], recent: [{ kind: 'topup', amount: '2000000', ref: nonce }] })

  const adjusted = await eventually('the adjustment published', async () => {
    const all = await admin.adjustments()
    return all.length > 0 ? all : undefined
  })
  t.match(adjusted, [{ wallet, delta: '2000000', reason: 'topup' }], 'one adjustment for the gateways')
  t.match(await admin.events('credit.topped_up'), [{ owner: { wallet }, data: { wallet, amount: '2000000', nonce } }])

  // sweeps go on: the top-up is never credited twice
  await admin.availableBecomes(wallet, usdc(2))
  const rows = await admin.sql.query("SELECT count(*)::int AS n FROM credit_entries WHERE kind = 'topup'")
  t.equal(rows.rows[0].n, 1)
})

t.test('a top-up whose payment fails is never credited', async (t) => {
  const admin = await startCreditAdmin(t)
  const p = payer()
  const { settle, nonce } = await admin.topUp(p, usdc(1))
  await settle('failed')
  await eventually('the top-up failed', async () => {
    const r = await admin.sql.query('SELECT state FROM credit_topups WHERE nonce = $1', [nonce])
    return r.rows[0]?.state === 'failed' ? true : undefined
  })
  t.match(await admin.account(p.address), { available: '0', balance: '0', pendingTopUps: [] })
})

t.test('debits delivered twice are recorded once, and a snapshot asked as soon as they are published includes them', async (t) => {
  const admin = await startCreditAdmin(t)
  const wallet = await admin.funded(payer(), usdc(1))
  const debits = Array.from({ length: 20 }, () => admin.debit(wallet, 10_000n))
  await admin.publishDebits(debits.slice(0, 12))
  await admin.publishDebits(debits.slice(8))
  // redelivered as a whole batch too (another message id): still once each
  await admin.publishDebits(debits)
  const snap = await admin.snapshot(wallet)
  t.same(snap.available, String(usdc(1) - 20n * 10_000n), 'every debit published before the request, each once')
  const account = await admin.account(wallet)
  t.equal(account.available, snap.available)
  t.equal(account.balance, snap.available)
  const entries = await admin.sql.query("SELECT count(*)::int AS n FROM credit_entries WHERE kind = 'debit'")
  t.equal(entries.rows[0].n, 20)
  t.equal(snap.entry, (await admin.sql.query("SELECT max(id)::text AS id FROM credit_entries WHERE kind = 'topup'")).rows[0].id)
})

t.test(
  'metered work: the usage report keeps at most the hold and gives the rest back; a report before its hold waits for it',
  async (t) => {
    const admin = await startCreditAdmin(t)
    const wallet = await admin.funded(payer(), usdc(1))

    const hold = admin.debit(wallet, 100_000n, 'hold')
    await admin.publishDebits([hold])
    t.match(await admin.snapshot(wallet), { available: String(usdc(1) - 100_000n) }, 'held at the start')
    t.match(await admin.account(wallet), { held: '100000', balance: '1000000' })

    await admin.publishUsage(admin.usage(wallet, hold.id, 30_000n))
    await admin.availableBecomes(wallet, usdc(1) - 30_000n, 'what was not used given back')
    t.match(await admin.account(wallet), { held: '0', balance: String(usdc(1) - 30_000n) })

    // reported above its hold: the hold is the most it can cost
    const greedy = admin.debit(wallet, 50_000n, 'hold')
    await admin.publishDebits([greedy])
    await admin.publishUsage(admin.usage(wallet, greedy.id, 900_000n))
    await admin.availableBecomes(wallet, usdc(1) - 80_000n, 'no more than the hold kept')

    // a failed job: the report keeps 0, the whole hold comes back; a second report changes nothing
    const failed = admin.debit(wallet, 200_000n, 'hold')
    const early = admin.usage(wallet, failed.id, 0n, 'failed')
    await admin.publishUsage(early)
    await eventually('the early report waiting', async () => {
      const r = await admin.sql.query('SELECT state FROM credit_holds WHERE id = $1', [failed.id])
      return r.rows[0]?.state === 'reported' ? true : undefined
    })
    await admin.publishDebits([failed])
    await admin.availableBecomes(wallet, usdc(1) - 80_000n, 'the failed job took nothing')
    t.match(await admin.account(wallet), { held: '0' })

    const released = await eventually('both releases published', async () => {
      const all = (await admin.adjustments()).filter((a) => a.reason === 'release')
      return all.length >= 2 ? all : undefined
    })
    t.same(
      released.map((a) => a.delta),
      ['70000', '200000'],
      'releases published to the gateways: the unused part, and the whole hold of the failed job',
    )
  },
)

t.test('a hold without a usage report within CREDIT_HOLD_TIMEOUT_MS comes back in full', async (t) => {
  const admin = await startCreditAdmin(t, { CREDIT_HOLD_TIMEOUT_MS: '1000' })
  const wallet = await admin.funded(payer(), usdc(1))
  const hold = admin.debit(wallet, 250_000n, 'hold')
  await admin.publishDebits([hold])
  t.match(await admin.snapshot(wallet), { available: '750000' })
  await admin.availableBecomes(wallet, usdc(1), 'the hold released after the timeout')
  const late = await admin.sql.query('SELECT state, kept::text FROM credit_holds WHERE id = $1', [hold.id])
  t.same(late.rows[0], { state: 'released', kept: '0' })
  // a report after the timeout: the payer keeps what was given back
  await admin.publishUsage(admin.usage(wallet, hold.id, 100_000n))
  await admin.publishDebits([admin.debit(wallet, 1n)])
  t.match(await admin.snapshot(wallet), { available: String(usdc(1) - 1n) })
})

t.test('credit.low once when the available credit falls under CREDIT_LOW_BALANCE, again only after it rose above it', async (t) => {
  const admin = await startCreditAdmin(t, { CREDIT_LOW_BALANCE: '500000' })
  const p = payer()
  const wallet = await admin.funded(p, usdc(1))
  t.same(await admin.events('credit.low'), [], 'a top-up above the threshold is not low')
  await admin.publishDebits([admin.debit(wallet, 600_000n)])
  await admin.snapshot(wallet)
  await admin.publishDebits([admin.debit(wallet, 100_000n)])
  await admin.snapshot(wallet)
  const low = await admin.events('credit.low')
  t.match(low, [{ owner: { wallet }, data: { wallet, available: '400000', threshold: '500000' } }], 'once, when it fell under')
  const { settle } = await admin.topUp(p, usdc(1))
  await settle()
  await admin.availableBecomes(wallet, usdc(1) + 300_000n)
  await admin.publishDebits([admin.debit(wallet, 1_000_000n)])
  await admin.snapshot(wallet)
  t.equal((await admin.events('credit.low')).length, 2, 'again after a top-up brought it above')
})

t.test('GET /credit: the signed-in wallet, a key bound to a wallet, any wallet for an admin key; nobody else', async (t) => {
  const admin = await startCreditAdmin(t)
  const wallet = await admin.funded(payer(), usdc(1))
  const other = payer().address.toLowerCase()
  const token = { [identityHeaders.internalToken]: testInternalToken }

  t.match((await admin.call('GET', '/credit', admin.headersOf(wallet))).body, { wallet, available: '1000000' }, 'signed in (SIWx)')
  const bound = { ...token, [identityHeaders.tier]: 'readonly', [identityHeaders.keyId]: 'key_b', [identityHeaders.wallet]: wallet }
  t.match((await admin.call('GET', '/credit', bound)).body, { wallet, available: '1000000' }, "a key's bound wallet")
  const asAdmin = { ...token, [identityHeaders.tier]: 'admin', [identityHeaders.keyId]: 'key_a' }
  t.match((await admin.call('GET', `/credit?wallet=${wallet}`, asAdmin)).body, { wallet, available: '1000000' }, 'an admin key')
  t.match((await admin.call('GET', `/credit?wallet=${other}`, asAdmin)).body, { wallet: other, available: '0', recent: [] })

  const refused = await admin.call('GET', `/credit?wallet=${other}`, bound)
  t.equal(refused.status, 403, "another wallet's credit is not a key's to read")
  const unbound = { ...token, [identityHeaders.tier]: 'readwrite', [identityHeaders.keyId]: 'key_c' }
  const nobody = await admin.call('GET', '/credit', unbound)
  t.equal(nobody.status, 403)
  t.match(nobody.body, { error: /sign in with it/ })
})

t.test('reconciliation: an account that differs from the sum of its entries is logged and counted', async (t) => {
  const admin = await startCreditAdmin(t, { CREDIT_RECONCILE_MS: '100' })
  const wallet = await admin.funded(payer(), usdc(1))
  t.same(await scrapeMetric(admin.svc.url, 'ats_credit_drifted_accounts'), { '': 0 })
  await admin.sql.query('UPDATE credit_accounts SET balance = balance + 1 WHERE wallet = $1', [wallet])
  const drifted = await eventually('the drift counted', async () => {
    const m = await scrapeMetric(admin.svc.url, 'ats_credit_drifted_accounts')
    return Object.values(m)[0] === 1 ? m : undefined
  })
  t.same(drifted, { '': 1 }, 'the drifted account is in ats_credit_drifted_accounts')
})
