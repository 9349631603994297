import { randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { startCreditAdmin } from './creditHelpers.ts'
import { adminHeaders, devnetUsdc, eventually } from './helpers.ts'

/**
 * Withdrawals on the devnet: the gateway's `withdraw` debit published to the credit stream, then
 * POST /credit/withdraw as the gateway forwards it (the signed-in wallet, the Idempotency-Key);
 * admin pays from the server wallet (devnet account 0) once, or refuses and gives the credit back.
 */

const payer = () => privateKeyToAccount(generatePrivateKey())

async function withdrawingAdmin(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const chain = await devnetUsdc()
  const admin = await startCreditAdmin(t, { ...chain.env, ...extra })
  /** what the gateway does: takes the amount from the credit under the key, then forwards the request */
  const withdraw = async (wallet: string, amount: bigint, key = `wd-${randomBytes(6).toString('hex')}`) => {
    await admin.publishDebits([admin.debit(wallet, amount, 'withdraw', key)])
    return { key, ...(await admin.call('POST', '/credit/withdraw', admin.headersOf(wallet, { 'idempotency-key': key }), {})) }
  }
  return { ...admin, chain, withdraw }
}

t.test('a withdrawal pays the credit back on chain once; a repeat answers the same and pays nothing more', async (t) => {
  const admin = await withdrawingAdmin(t)
  const p = payer()
  const wallet = await admin.funded(p, 3_000_000n)
  const first = await admin.withdraw(wallet, 2_000_000n)
  t.equal(first.status, 200)
  t.match(first.body, { id: first.key, wallet, amount: '2000000', state: 'paid', txHash: /^0x[0-9a-f]{64}$/ })
  t.equal(first.headers.get('idempotency-key'), first.key)
  t.equal(await admin.chain.balanceOf(p.address), 2_000_000n, 'the wallet holds what was withdrawn')
  const receipt = await admin.chain.publicClient.getTransactionReceipt({ hash: first.body.txHash })
  t.equal(receipt.from.toLowerCase(), admin.chain.serverWallet.toLowerCase(), 'paid from the server wallet')

  const again = await admin.call('POST', '/credit/withdraw', admin.headersOf(wallet, { 'idempotency-key': first.key }), {})
  t.same({ status: again.status, body: again.body }, { status: 200, body: first.body }, 'the repeat answers the first result')
  t.equal(await admin.chain.balanceOf(p.address), 2_000_000n, 'and pays nothing more')
  t.match(await admin.account(wallet), { available: '1000000', balance: '1000000', recent: [{ kind: 'withdraw', amount: '2000000' }] })

  const unknown = await admin.call('POST', '/credit/withdraw', admin.headersOf(wallet, { 'idempotency-key': 'never-taken' }), {})
  t.equal(unknown.status, 404, 'nothing is paid for a withdrawal the gateway did not take from the credit')
})

t.test('while the server wallet is paused a withdrawal is refused (423) and its credit given back', async (t) => {
  const admin = await withdrawingAdmin(t)
  const p = payer()
  const wallet = await admin.funded(p, 1_000_000n)
  const pause = await fetch(`${admin.svc.url}/admin/wallet/pause`, {
    method: 'POST',
    headers: { ...adminHeaders, 'content-type': 'application/json' },
    body: JSON.stringify({ reason: 'incident' }),
  })
  t.equal(pause.status, 200)
  const refused = await eventually('the pause seen', async () => {
    const r = await admin.withdraw(wallet, 1_000_000n)
    if (r.status === 423) return r
    // refused for another reason (the pause not seen yet) would be a failure: it was paid
    t.not(r.status, 200, 'never paid while paused')
    return undefined
  })
  t.match(refused.body, { error: /given back.*paused.*incident/ })
  await admin.availableBecomes(wallet, 1_000_000n, 'the credit given back')
  t.equal(await admin.chain.balanceOf(p.address), 0n, 'nothing sent')
  const repeat = await admin.call('POST', '/credit/withdraw', admin.headersOf(wallet, { 'idempotency-key': refused.key }), {})
  t.same({ status: repeat.status, body: repeat.body }, { status: 423, body: refused.body }, 'a repeat answers the refusal')
  await eventually('the refund sent to the gateways', async () =>
    (await admin.adjustments()).find((a) => a.reason === 'refund' && a.delta === '1000000'),
  )
})

t.test('a withdrawal over CREDIT_WITHDRAW_MAX is refused (403) and its credit given back', async (t) => {
  const admin = await withdrawingAdmin(t, { CREDIT_WITHDRAW_MAX: '500000' })
  const p = payer()
  const wallet = await admin.funded(p, 1_000_000n)
  const over = await admin.withdraw(wallet, 600_000n)
  t.equal(over.status, 403)
  t.match(over.body, { error: /CREDIT_WITHDRAW_MAX/ })
  await admin.availableBecomes(wallet, 1_000_000n, 'the credit given back')
  const within = await admin.withdraw(wallet, 500_000n)
  t.match(within, { status: 200, body: { state: 'paid' } })
  t.equal(await admin.chain.balanceOf(p.address), 500_000n)
})
