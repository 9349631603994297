import { setTimeout as sleep } from 'node:timers/promises'
import { eip3009Abi, transferWithAuthorizationTypes, usdcDomain } from '@ats/chain'
import { startService } from '@ats/service-kit/testing'
import t from 'tap'
import { createWalletClient, http, parseSignature, type Hex } from 'viem'
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { adminService } from '@ats/admin/service'
import { adminKey, eventually, fundedAccount as fundAccount, startPaidFleet } from '../fleet.ts'

/**
 * Payers who try to be served without paying: an authorization whose nonce the payer spends on
 * chain first, or after being served; payments that together exceed the balance, at once or in a
 * burst while settlement runs. One fleet with the default limits: admin settles every 100 ms; the
 * last test restarts it.
 */
t.test('payers who try to be served without paying', async (t) => {
  const fleet = await startPaidFleet(t, { adminEnv: { SETTLEMENT_INTERVAL_MS: '100' } })
  const devnetAccount = (i: number) => privateKeyToAccount(fleet.devnet.accounts[i]!.privateKey as Hex)
  const walletOf = (account: PrivateKeyAccount) => createWalletClient({ account, transport: http(fleet.devnet.rpcUrl) })

  /** A new account holding `amount` USDC base units (from devnet account 1). */
  const fundedAccount = (amount: bigint) => fundAccount(fleet, amount)

  const nonceOf = (header: string) => JSON.parse(Buffer.from(header, 'base64').toString('utf8')).payload.authorization.nonce as Hex

  /**
   * The payer spends `nonce` on chain: a transfer of 0 to themself, authorized with the same nonce
   * (EIP-3009 nonces belong to the payer, not to one transfer), sent by devnet account 3.
   */
  async function burnNonce(payer: PrivateKeyAccount, nonce: Hex) {
    const now = BigInt(Math.floor(Date.now() / 1000))
    const message = { from: payer.address, to: payer.address, value: 0n, validAfter: 0n, validBefore: now + 600n, nonce }
    const signature = await payer.signTypedData({
      domain: usdcDomain(31337, fleet.usdc),
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message,
    })
    const { r, s, v } = parseSignature(signature)
    const hash = await walletOf(devnetAccount(3)).writeContract({
      chain: null,
      address: fleet.usdc,
      abi: eip3009Abi,
      functionName: 'transferWithAuthorization',
      args: [message.from, message.to, message.value, message.validAfter, message.validBefore, nonce, Number(v), r, s],
    })
    t.equal((await fleet.publicClient.waitForTransactionReceipt({ hash })).status, 'success', 'the nonce is spent on chain')
  }

  const paid = (header: string, path = '/agent/skills') => fleet.request(path, { headers: { 'x-payment': header } })

  t.test('a payment whose nonce the payer already spent on chain is refused 402, before the request is served', async (t) => {
    const payer = await fundedAccount(100_000n)
    const header = await fleet.pay({ payer })
    await burnNonce(payer, nonceOf(header))
    const res = await paid(header)
    t.equal(res.status, 402)
    t.match(
      res.body.error,
      new RegExp(`^nonce already used on chain: authorization ${nonceOf(header)} of ${payer.address} was used or canceled`),
    )
    t.equal((await paid(await fleet.pay({ payer }))).status, 200, 'a payment with a fresh nonce passes')
  })

  t.test(
    'three concurrent payments of just over half the balance: one is served, the others are refused naming what is reserved',
    async (t) => {
      const payer = await fundedAccount(30_000n)
      const headers = await Promise.all([0, 1, 2].map(() => fleet.pay({ payer, value: 15_001n })))
      const answers = await Promise.all(headers.map((header) => paid(header)))
      t.same(answers.map((a) => a.status).sort(), [200, 402, 402])
      for (const refused of answers.filter((a) => a.status === 402)) {
        t.match(
          refused.body.error,
          new RegExp(
            `^insufficient funds: ${payer.address} holds \\d+, of which \\d+ is reserved by unsettled payments; the payment is 15001$`,
          ),
        )
      }
      // once the served payment is settled its reservation ends with it: what is left can be spent
      const rest = await eventually('the first payment settled', async () => {
        const balance = await fleet.balanceOf(payer.address)
        return balance === 30_000n - 15_001n ? balance : undefined
      })
      t.equal(
        (await paid(await fleet.pay({ payer, value: rest }))).status,
        200,
        'the rest of the balance pays once the first payment settled',
      )
    },
  )

  t.test(
    'a payer holding 100 prices sends 150 paid requests in 3 s while settlement runs: served exactly 100 times, the rest 402 naming what is reserved',
    async (t) => {
      const payer = await fundedAccount(100n * 10_000n)
      const headers = await Promise.all(Array.from({ length: 150 }, () => fleet.pay({ payer })))
      // one every 20 ms, each sent without waiting for the answers before it
      const answers = await Promise.all(headers.map(async (header, i) => paid(await sleep(i * 20, header))))
      const count = (status: number) => answers.filter((a) => a.status === status).length
      t.same(
        { served: count(200), refused: count(402), other: answers.length - count(200) - count(402) },
        { served: 100, refused: 50, other: 0 },
        'no 503, no 429',
      )
      for (const refused of answers.filter((a) => a.status === 402)) {
        t.match(
          refused.body.error,
          new RegExp(
            `^insufficient funds: ${payer.address} holds \\d+, of which \\d+ is reserved by unsettled payments; the payment is 10000$`,
          ),
        )
      }
      // every served payment settles: the balance is spent to the last unit, and the payer is not blocked
      // (a payer's payments settle one after another: 100 of them take tens of seconds on a busy machine)
      await eventually('every payment settled', async () => ((await fleet.balanceOf(payer.address)) === 0n ? true : undefined), 120_000)
      const blocked = await fleet.request('/admin/payers/blocked', { key: adminKey })
      t.notOk(JSON.stringify(blocked.body).toLowerCase().includes(payer.address.toLowerCase()), 'the payer is not blocked')
    },
  )

  t.test(
    'a payer who spends the nonce on chain after being served is blocked once settlement finds it, and refused from then on',
    async (t) => {
      const payer = await fundedAccount(100_000n)
      // admin is down, so the payer can act between the answer and the settlement
      const adminPort = new URL(fleet.admin.url).port
      await fleet.admin.close()
      const header = await fleet.pay({ payer })
      t.equal((await paid(header)).status, 200, 'served')
      await burnNonce(payer, nonceOf(header))
      await startService(t, adminService, { ...fleet.adminEnv, PORT: adminPort })

      const refused = await eventually('the payer refused', async () => {
        // probed on a path the service answers 404: a probe that passes is not charged
        const res = await paid(await fleet.pay({ payer }), '/agent/missing')
        return res.status === 402 && /^payer refused/.test(res.body.error) ? res : undefined
      })
      t.match(
        refused.body.error,
        new RegExp(
          `^payer refused: ${payer.address} has a payment that could not settle \\(authorization ${nonceOf(header)} of ${payer.address} was used by transaction 0x[0-9a-f]{64}`,
          'i',
        ),
      )
      const revenue = await fleet.request('/admin/revenue', { key: adminKey })
      t.match(
        revenue.body.recentPayments.find((p: { payer: string }) => p.payer === payer.address),
        { settlement: 'failed', settleError: /the payer signed another authorization with the same nonce/ },
      )
    },
  )
})
