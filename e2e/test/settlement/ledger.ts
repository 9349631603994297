// The payment ledger through the gateway and admin: payments recorded, settled on the devnet, refused payers.
import { identityHeaders } from '@ats/contracts'
import { startService, testInternalToken } from '@ats/service-kit/testing'
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { eip3009Abi, transferWithAuthorizationTypes, usdcDomain } from '@ats/chain'
import { createWalletClient, http, parseSignature, toHex, type Address, type Hex } from 'viem'
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { adminService } from '@ats/admin/service'
import { startTestDevnet } from '@ats/devnet'
import { adminKey, eventually, fundAccount, fundedAccount, startPaidFleet } from '../fleet.ts'

t.test('the payment ledger and its settlement on the devnet', async (t) => {
  // one devnet for the file: the tests run one after another, each with its own fleet and ledger
  const chain = await startTestDevnet(t)
  const settling = (t: Test, extra: NodeJS.ProcessEnv = {}) =>
    // probes until a payer is refused (or accepted again) fail many payment checks from one address
    startPaidFleet(t, { chain, adminEnv: { SETTLEMENT_INTERVAL_MS: '100', ...extra }, gatewayEnv: { AUTH_FAILURE_LIMIT: '1000' } })

  type Fleet = Awaited<ReturnType<typeof settling>>

  const revenue = async (fleet: Fleet) => {
    const res = await fleet.request('/admin/revenue', { key: adminKey })
    if (res.status !== 200) throw new Error(`GET /admin/revenue answered ${res.status}`)
    return res.body
  }

  async function paidRequest(fleet: Fleet, header: string, path = '/agent/skills') {
    const res = await fleet.request(path, { headers: { 'x-payment': header } })
    return res.status
  }

  /** `account` signs its whole USDC balance over to devnet account 1, which sends it (a fresh account has no gas). */
  async function moveAll(fleet: Fleet, account: PrivateKeyAccount) {
    const message = {
      from: account.address,
      to: fleet.devnet.accounts[1]!.address as Address,
      value: await fleet.balanceOf(account.address),
      validAfter: 0n,
      validBefore: BigInt(Math.floor(Date.now() / 1000) + 600),
      nonce: toHex(randomBytes(32)),
    }
    const signature = await account.signTypedData({
      domain: usdcDomain(31337, fleet.usdc),
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message,
    })
    const { r, s, v } = parseSignature(signature)
    const sender = createWalletClient({
      account: privateKeyToAccount(fleet.devnet.accounts[1]!.privateKey as Hex),
      transport: http(fleet.devnet.rpcUrl),
    })
    const args = [message.from, message.to, message.value, message.validAfter, message.validBefore, message.nonce, Number(v), r, s] as const
    const hash = await sender.writeContract({
      chain: null,
      address: fleet.usdc,
      abi: eip3009Abi,
      functionName: 'transferWithAuthorization',
      args,
    })
    await fleet.publicClient.waitForTransactionReceipt({ hash })
  }

  /**
   * Payments across services: what a client pays at the gateway is recorded by admin and settled
   * on chain, and what admin blocks the gateways refuse. How admin records, settles, counts and
   * blocks on its own is specified with admin: services/admin/test/{settlement,ledger,payers}.test.ts.
   */

  t.test(
    'a payment through the gateway is settled on chain: USDC moves from payer to payTo and the tx hash is in the ledger',
    async (t) => {
      const fleet = await settling(t)
      const before = { payer: await fleet.balanceOf(fleet.payer.address), payTo: await fleet.balanceOf(fleet.payTo) }
      t.equal(await paidRequest(fleet, await fleet.pay()), 200)

      const settled = await eventually('the payment settled', async () => {
        const [latest] = (await revenue(fleet)).recentPayments
        return latest?.settlement === 'settled' ? latest : undefined
      })
      t.match(settled, {
        payer: fleet.payer.address,
        amount: '10000',
        route: 'GET /agent/skills',
        txHash: /^0x[0-9a-f]{64}$/,
        settleError: null,
      })
      const receipt = await fleet.publicClient.getTransactionReceipt({ hash: settled.txHash as Hex })
      t.equal(receipt.status, 'success')
      t.equal(await fleet.balanceOf(fleet.payer.address), before.payer - 10_000n, 'the payer paid 10000 base units')
      t.equal(await fleet.balanceOf(fleet.payTo), before.payTo + 10_000n, 'payTo received them')
    },
  )

  t.test(
    'the ledger records what the gateway charged: who paid, how much, for which route; a request answered 404 is not charged',
    async (t) => {
      const fleet = await settling(t, { SETTLEMENT_ENABLED: 'false' })
      const second = await fundedAccount(fleet, 1_000_000n)
      t.equal(await paidRequest(fleet, await fleet.pay(), '/agent/missing'), 404, 'the service answers 404')
      t.equal(await paidRequest(fleet, await fleet.pay()), 200)
      t.equal(await paidRequest(fleet, await fleet.pay({ payer: second, value: 25_000n })), 200, 'paying more than the price is accepted')

      const summary = await eventually('2 payments recorded', async () => {
        const body = await revenue(fleet)
        return body.requestCount === 2 ? body : undefined
      })
      t.match(summary, { totalUsdc: '35000', uniquePayers: 2, requestCount: 2 }, 'the 404 is not in the ledger')
      t.match(summary.recentPayments, [
        { payer: second.address, amount: '25000', route: 'GET /agent/skills' },
        { payer: fleet.payer.address, amount: '10000', route: 'GET /agent/skills' },
      ])
    },
  )

  t.test('payments charged while admin is down are recorded when it is back', async (t) => {
    const fleet = await settling(t, { SETTLEMENT_ENABLED: 'false' })
    await fleet.admin.close()
    for (let i = 0; i < 3; i++) t.equal(await paidRequest(fleet, await fleet.pay()), 200, 'paid routes do not need admin')

    const back = await startService(t, adminService, fleet.adminEnv)
    const summary = await eventually('the 3 payments recorded', async () => {
      const res = await fetch(`${back.url}/admin/revenue`, { headers: { [identityHeaders.internalToken]: testInternalToken } })
      const body = (await res.json()) as { requestCount: number; totalUsdc: string }
      return body.requestCount === 3 ? body : undefined
    })
    t.equal(summary.totalUsdc, '30000')
  })

  t.test('a payer admin blocks for lack of funds is refused at the edge until an admin unblocks them', async (t) => {
    const fleet = await settling(t)
    const poor = await fundedAccount(fleet, 15_000n)
    // the edge reserves what a payer's unsettled payments owe (a second payment is refused
    // there), but the payer can still move the money away after being served: admin is down
    // meanwhile, so the transfer comes before the settlement
    const adminPort = new URL(fleet.admin.url).port
    await fleet.admin.close()
    t.equal(await paidRequest(fleet, await fleet.pay({ payer: poor })), 200)
    t.equal(
      await paidRequest(fleet, await fleet.pay({ payer: poor })),
      402,
      'a second payment is more than the balance minus what is reserved',
    )
    await moveAll(fleet, poor)
    await startService(t, adminService, { ...fleet.adminEnv, PORT: adminPort })

    // the payment cannot settle: admin blocks the payer and every gateway refuses them. Probed on a
    // path the service answers 404, so that a probe that still passes is not charged: a payment
    // charged now would fail too and block the payer again after the unblock below
    const refused = await eventually('the payer refused', async () => {
      const res = await fleet.request('/agent/missing', { headers: { 'x-payment': await fleet.pay({ payer: poor }) } })
      return res.status === 402 && /^payer refused/.test(res.body.error) ? res : undefined
    })
    t.match(refused.body.error, new RegExp(`^payer refused: ${poor.address} has a payment that could not settle \\(insufficient funds`))
    t.equal(await paidRequest(fleet, await fleet.pay()), 200, 'other payers still pass')

    const unblocked = await fleet.request(`/admin/payers/blocked/${poor.address}`, { method: 'DELETE', key: adminKey })
    t.same(unblocked.body, { ok: true, payer: poor.address.toLowerCase() })
    await fundAccount(fleet, poor.address, 20_000n)
    await eventually('the payer accepted again', async () =>
      (await paidRequest(fleet, await fleet.pay({ payer: poor }))) === 200 ? true : undefined,
    )
  })
})
