import { eip3009Abi, MULTICALL3_ADDRESS, multicall3Abi } from '@ats/chain'
import type { PaymentCharged } from '@ats/contracts'
import { createChainContext } from '@ats/service-kit'
import Fastify from 'fastify'
import pg from 'pg'
import t from 'tap'
import {
  createWalletClient,
  decodeFunctionData,
  encodeFunctionData,
  getAddress,
  http,
  keccak256,
  parseSignature,
  type Address,
  type Hex,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import type { PaymentRow } from '../../src/payments/ledger.ts'
import { onchainSettlement } from '../../src/payments/onchainSettlement.ts'
import { devnetUsdc, eventually, freshAddress, inState, signCharge, startAdmin, startSettlingAdmin } from '../helpers.ts'

/**
 * Settlement when things go wrong: an admin killed while its transaction waits for a block, an
 * authorization relayed by someone else first, an authorization whose nonce the payer spent on
 * another transfer, a kept transaction that was never broadcast or can no longer be mined.
 */

/** valid for ten minutes: the fault test holds blocks back for a while */
const longValidity = () => BigInt(Math.floor(Date.now() / 1000) + 600)

/** The `transferWithAuthorization` arguments of the charge's signed authorization. */
function transferArgs(charge: PaymentCharged) {
  const { r, s, v } = parseSignature(charge.signature as Hex)
  const a = charge.authorization
  return [
    a.from as Address,
    a.to as Address,
    BigInt(a.value),
    BigInt(a.validAfter),
    BigInt(a.validBefore),
    a.nonce as Hex,
    Number(v),
    r,
    s,
  ] as const
}

async function chainTools() {
  const chain = await devnetUsdc()
  const { publicClient, devnet, usdc } = chain
  const rpc = (method: string, params: unknown[] = []) => publicClient.request({ method: method as any, params: params as any })
  const relayer = createWalletClient({ account: privateKeyToAccount(devnet.accounts[2]!.privateKey), transport: http(devnet.rpcUrl) })

  /** Sends the charge's authorization from devnet account 2, as any relayer could. */
  const relay = async (charge: PaymentCharged) => {
    const hash = await relayer.writeContract({
      chain: null,
      address: usdc,
      abi: eip3009Abi,
      functionName: 'transferWithAuthorization',
      args: transferArgs(charge),
    })
    const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 50 })
    if (receipt.status !== 'success') throw new Error(`relay ${hash} reverted`)
    return hash
  }

  /** The server wallet's mined transaction count. */
  const sentCount = () => publicClient.getTransactionCount({ address: chain.serverWallet, blockTag: 'latest' })

  /** The authorization nonce of a `transferWithAuthorization` call's data, if it is one. */
  const nonceOf = (data: Hex) => {
    const call = decodeFunctionData({ abi: eip3009Abi, data })
    return call.functionName === 'transferWithAuthorization' ? call.args[5] : undefined
  }

  /**
   * Every settlement the server wallet sent in blocks after `fromBlock`: the transaction and the
   * authorization nonces it carried (one, straight to the USDC; or a batch through Multicall3).
   */
  const settlementsSince = async (fromBlock: bigint) => {
    const latest = await publicClient.getBlockNumber({ cacheTime: 0 })
    const found: Array<{ hash: Hex; nonces: Hex[] }> = []
    for (let n = fromBlock + 1n; n <= latest; n++) {
      const block = await publicClient.getBlock({ blockNumber: n, includeTransactions: true })
      for (const tx of block.transactions) {
        if (getAddress(tx.from) !== getAddress(chain.serverWallet) || !tx.to) continue
        if (getAddress(tx.to) === getAddress(usdc)) {
          const nonce = nonceOf(tx.input)
          if (nonce) found.push({ hash: tx.hash, nonces: [nonce] })
        } else if (getAddress(tx.to) === getAddress(MULTICALL3_ADDRESS)) {
          const batch = decodeFunctionData({ abi: multicall3Abi, data: tx.input })
          if (batch.functionName !== 'aggregate3') continue
          const calls = batch.args[0].filter((call) => getAddress(call.target) === getAddress(usdc))
          found.push({ hash: tx.hash, nonces: calls.map((call) => nonceOf(call.callData)).filter((nonce) => nonce !== undefined) })
        }
      }
    }
    return found
  }
  return { ...chain, rpc, relayer, relay, sentCount, settlementsSince }
}

t.test(
  'a batch whose receipt never arrives, admin killed, the node mines later: every payment settled once, with the hash on chain',
  async (t) => {
    const chain = await chainTools()
    const { publicClient, rpc } = chain
    const payers = [await chain.fundedPayer(1_000_000n), await chain.fundedPayer(1_000_000n)]
    const payTo = freshAddress()
    // a child process, so it can be killed for real; a short lease, so the next admin takes over soon
    const first = await startAdmin(
      t,
      { ...chain.env, SETTLEMENT_INTERVAL_MS: '100', SETTLEMENT_LEASE_MS: '2000', LOG_LEVEL: 'warn' },
      { process: true },
    )
    const db = new pg.Client({ connectionString: first.env.DATABASE_URL })
    await db.connect()
    t.teardown(() => db.end())
    const attempts = async () =>
      (await db.query<{ attempts: number }>('SELECT min(attempts) AS attempts FROM admin.payments')).rows[0]?.attempts ?? 0

    const startBlock = await publicClient.getBlockNumber({ cacheTime: 0 })
    const sentBefore = await chain.sentCount()
    await rpc('evm_setAutomine', [false])
    t.teardown(() => rpc('evm_setAutomine', [true]))
    // two payments of each payer, recorded together: one batch
    const charges = await Promise.all(
      [...payers, ...payers].map((payer) => signCharge(chain.usdc, payer, { payTo, validBefore: longValidity() })),
    )
    await first.publish(charges)

    // settling, all with the batch's hash, while the transaction waits in the node for a block
    const settling = await first.paymentsWhen(
      'the payments settling with their batch',
      (payments) => payments.length === 4 && payments.every((p) => p.settlement === 'settling' && p.txHash !== null),
    )
    const hash = settling[0]!.txHash as Hex
    t.ok(
      settling.every((p) => p.txHash === hash),
      'one transaction for the four',
    )
    const pending = await eventually('the node to hold the transaction', () => publicClient.getTransaction({ hash }).catch(() => undefined))
    t.equal(pending.blockNumber, null, 'broadcast, not mined')
    t.equal(getAddress(pending.from), getAddress(chain.serverWallet), 'sent by the server wallet')
    const killedAt = await attempts()

    process.kill(first.svc.pid!, 'SIGKILL')
    await eventually('the first admin to be gone', () =>
      fetch(`${first.svc.url}/ready`).then(
        () => undefined,
        () => true,
      ),
    )

    // and the node loses it (as a restarted node would): only the kept bytes can bring it back
    await rpc('anvil_dropTransaction', [hash])
    t.equal(
      await publicClient.getTransactionCount({ address: chain.serverWallet, blockTag: 'pending' }),
      sentBefore,
      'the node holds nothing of the server wallet',
    )

    const second = await startAdmin(t, {}, { env: first.env })
    const retaken = await eventually('the new admin to take the batch up and broadcast the kept transaction again', async () => {
      const { recentPayments } = await second.revenue()
      const known = await publicClient.getTransaction({ hash }).then(
        () => true,
        () => false,
      )
      return (await attempts()) > killedAt && known ? recentPayments : undefined
    })
    t.ok(
      retaken.every((p) => p.settlement === 'settling' && p.txHash === hash),
      'still settling, with the same transaction',
    )
    t.equal(
      await publicClient.getTransactionCount({ address: chain.serverWallet, blockTag: 'pending' }),
      sentBefore + 1,
      'one transaction of the server wallet in the node: none signed anew',
    )

    await rpc('evm_setAutomine', [true])
    await rpc('evm_mine')
    const settled = await second.paymentsWhen(
      'the payments settled',
      (payments) => payments.filter(inState('settled')).length === 4,
      20_000,
    )
    t.ok(
      settled.every((p) => p.txHash === hash && p.settleError === null),
      'every payment settled with the hash of the transaction on chain',
    )
    t.match(await publicClient.getTransactionReceipt({ hash }), { status: 'success' })
    t.equal(await chain.balanceOf(payTo), 40_000n, 'payTo received each amount once')
    for (const payer of payers) t.equal(await chain.balanceOf(payer.address), 980_000n, 'each payer paid twice')
    t.equal(await chain.sentCount(), sentBefore + 1, 'the server wallet sent one transaction')
    t.equal(
      (await db.query('SELECT hash FROM admin.settlement_transactions')).rowCount,
      0,
      'its kept bytes dropped once every payment of it settled',
    )
    const sent = await chain.settlementsSince(startBlock)
    t.same(
      sent.map((s) => ({ hash: s.hash, nonces: [...s.nonces].sort() })),
      [{ hash, nonces: charges.map((c) => c.authorization.nonce as Hex).sort() }],
      'one batch of transferWithAuthorization, of these payments',
    )
  },
)

t.test(
  'an authorization relayed by someone else while its batch waits for a block: the others settle with the batch, it with the relay',
  async (t) => {
    const chain = await chainTools()
    const { publicClient, rpc } = chain
    const admin = await startSettlingAdmin(t)
    const payers = [await chain.fundedPayer(1_000_000n), await chain.fundedPayer(1_000_000n), await chain.fundedPayer(1_000_000n)]
    const payTo = freshAddress()
    const charges = await Promise.all(payers.map((payer) => signCharge(chain.usdc, payer, { payTo, validBefore: longValidity() })))

    await rpc('evm_setAutomine', [false])
    t.teardown(() => rpc('evm_setAutomine', [true]))
    await admin.publish(charges)
    const settling = await admin.paymentsWhen(
      'the batch in the node',
      (payments) => payments.length === 3 && payments.every((p) => p.settlement === 'settling' && p.txHash !== null),
    )
    const batch = settling[0]!.txHash as Hex
    await eventually('the node to hold the batch', () => publicClient.getTransaction({ hash: batch }).catch(() => undefined))
    // a relayer sends one of the authorizations with a higher tip: the block takes it first, so that
    // call fails inside the batch (allowFailure) and the rest of the batch goes through
    const relayed = await chain.relayer.writeContract({
      chain: null,
      address: chain.usdc,
      abi: eip3009Abi,
      functionName: 'transferWithAuthorization',
      args: transferArgs(charges[1]!),
      // its own gas: an estimate would see the batch's pending transfer and revert
      gas: 200_000n,
      maxFeePerGas: 500_000_000_000n,
      maxPriorityFeePerGas: 200_000_000_000n,
    })
    await rpc('evm_setAutomine', [true])
    await rpc('evm_mine')
    const block = await publicClient.getTransactionReceipt({ hash: relayed })
    t.equal(
      (await publicClient.getTransactionReceipt({ hash: batch })).blockNumber,
      block.blockNumber,
      'mined in one block, the relay first',
    )

    const settled = await admin.paymentsWhen('all three settled', (payments) => payments.filter(inState('settled')).length === 3)
    const hashOf = (i: number) => settled.find((p) => p.requestId === charges[i]!.requestId)?.txHash
    t.equal(hashOf(0), batch, 'the first with the batch')
    t.equal(hashOf(2), batch, 'the third with the batch')
    t.equal(hashOf(1), relayed, 'the relayed one with the transaction that used its authorization')
    t.equal(await chain.balanceOf(payTo), 30_000n, 'each paid once')
  },
)

t.test('an authorization relayed by someone else first: settled with that transaction, nothing sent', async (t) => {
  const chain = await chainTools()
  const admin = await startSettlingAdmin(t)
  const payer = await chain.fundedPayer(1_000_000n)
  const payTo = freshAddress()
  const charge = await signCharge(chain.usdc, payer, { payTo })
  const relayed = await chain.relay(charge)
  const sentBefore = await chain.sentCount()

  await admin.publish([charge])
  const [settled] = await admin.paymentsWhen('the payment settled', (payments) => payments.some(inState('settled')))
  t.match(settled, { settlement: 'settled', txHash: relayed, settleError: null }, 'the transaction that used the authorization')
  t.equal(await chain.balanceOf(payTo), 10_000n, 'paid once')
  t.equal(await chain.sentCount(), sentBefore, 'the server wallet sent nothing')
})

t.test('an authorization whose nonce the payer spent on another transfer: failed, saying where it went', async (t) => {
  const chain = await chainTools()
  const admin = await startSettlingAdmin(t)
  const payer = await chain.fundedPayer(1_000_000n)
  const payTo = freshAddress()
  const elsewhere = freshAddress()
  const charge = await signCharge(chain.usdc, payer, { payTo })
  // EIP-3009 binds a nonce to its payer only: the payer signs a second transfer with the same nonce and has it sent first
  const spent = await chain.relay(
    await signCharge(chain.usdc, payer, { payTo: elsewhere, nonce: charge.authorization.nonce as Hex, value: 7_000n }),
  )

  await admin.publish([charge])
  const [failed] = await admin.paymentsWhen('the payment failed', (payments) => payments.some(inState('failed')))
  t.equal(
    failed!.settleError,
    `authorization ${charge.authorization.nonce} of ${payer.address} was used by transaction ${spent} for a transfer of 7000 to ${elsewhere}, not this payment of 10000 to ${payTo}: the payer signed another authorization with the same nonce`,
  )
  t.equal(failed!.txHash, null)
  t.equal(await chain.balanceOf(payTo), 0n, 'payTo received nothing')
  const blocked = await admin.call('GET', '/admin/payers/blocked')
  t.match(blocked.body, { payers: [{ payer: payer.address.toLowerCase(), reason: failed!.settleError }] }, 'the payer is blocked')
})

t.test('a kept transaction is broadcast again, never signed anew; one that can no longer be mined is replaced', async (t) => {
  const chain = await chainTools()
  const { publicClient } = chain
  const context = createChainContext({
    RPC_URL: chain.env.RPC_URL,
    CHAIN_ID: 31337,
    SERVER_WALLET_PRIVATE_KEY: chain.env.SERVER_WALLET_PRIVATE_KEY,
  })
  t.teardown(() => context.close())
  const settlement = onchainSettlement(context, { receiptTimeoutMs: 5_000 })
  const wallet = privateKeyToAccount(chain.env.SERVER_WALLET_PRIVATE_KEY as Hex)
  const payer = await chain.fundedPayer(1_000_000n)

  /** A ledger row for `charge` holding a transaction signed at `nonce` but never broadcast. */
  const keptRow = async (charge: PaymentCharged, nonce: number): Promise<PaymentRow> => {
    const a = charge.authorization
    const raw = await wallet.signTransaction({
      type: 'eip1559',
      chainId: 31337,
      nonce,
      gas: 200_000n,
      maxFeePerGas: 10_000_000_000n,
      maxPriorityFeePerGas: 1_000_000_000n,
      to: chain.usdc,
      data: encodeFunctionData({
        abi: eip3009Abi,
        functionName: 'transferWithAuthorization',
        args: transferArgs(charge),
      }),
    })
    return {
      id: 1n,
      payer: charge.payer.toLowerCase(),
      payTo: charge.payTo.toLowerCase(),
      asset: charge.asset,
      chainId: charge.chainId,
      network: charge.network,
      x402Version: 1,
      amount: BigInt(a.value),
      validAfter: BigInt(a.validAfter),
      validBefore: BigInt(a.validBefore),
      nonce: a.nonce.toLowerCase(),
      signature: charge.signature.toLowerCase(),
      method: charge.method,
      route: charge.route,
      resource: charge.resource,
      requestId: charge.requestId,
      chargedAt: new Date(charge.chargedAt),
      recordedAt: new Date(),
      state: 'settling',
      attempts: 1,
      nextAttemptAt: new Date(),
      txHash: keccak256(raw),
      rawTx: raw,
      settleError: null,
      settledAt: null,
    } as PaymentRow
  }
  const signedAnew: Hex[] = []
  const hooks = { onSigned: async (_: PaymentRow[], tx: { hash: Hex }) => void signedAnew.push(tx.hash) }

  // signed and kept, then the broadcast was lost: the same bytes go out again
  const lostTo = freshAddress()
  const lost = await keptRow(await signCharge(chain.usdc, payer, { payTo: lostTo }), await chain.sentCount())
  t.same(await settlement.settle([lost], hooks), [{ kind: 'settled', txHash: lost.txHash }], 'the kept transaction, broadcast again')
  t.same(signedAnew, [], 'nothing signed anew')
  t.equal(await chain.balanceOf(lostTo), 10_000n)

  // signed and kept, but its nonce went to another transaction of the wallet: it can never be mined
  const replacedTo = freshAddress()
  const replaced = await keptRow(await signCharge(chain.usdc, payer, { payTo: replacedTo }), await chain.sentCount())
  const other = await context.sender().send({ to: chain.serverWallet, value: 0n })
  await publicClient.waitForTransactionReceipt({ hash: other.hash, pollingInterval: 50 })
  const [outcome] = await settlement.settle([replaced], hooks)
  t.equal(signedAnew.length, 1, 'one new transaction signed')
  t.same(outcome, { kind: 'settled', txHash: signedAnew[0] }, 'settled by the new one')
  t.not(signedAnew[0], replaced.txHash)
  t.equal(await chain.balanceOf(replacedTo), 10_000n, 'paid once')
})

t.test("a facilitator's answer lost after it sent the transfer: its refusal of the retry is traced, the payment settled", async (t) => {
  const chain = await chainTools()
  const calls: string[] = []
  let relayed: Hex | undefined
  const facilitator = Fastify()
  facilitator.post('/settle', async (request, reply) => {
    const body = request.body as any
    const { authorization, signature } = body.paymentPayload.payload
    calls.push(authorization.nonce)
    // the first /settle sends the transfer, then its answer is lost (a 502 on the way back)
    if (calls.length === 1) {
      relayed = await chain.relay({ authorization, signature } as PaymentCharged)
      return reply.code(502).send({ error: 'bad gateway' })
    }
    return {
      success: false,
      errorReason: 'invalid_exact_evm_payload_authorization_nonce_used',
      transaction: '',
      network: body.paymentPayload.network,
      payer: authorization.from,
    }
  })
  const url = await facilitator.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => facilitator.close())
  const { RPC_URL, CHAIN_ID, ADDRESS_BOOK } = chain.env
  const admin = await startAdmin(t, {
    FACILITATOR_URL: url,
    SETTLEMENT_INTERVAL_MS: '100',
    SETTLEMENT_RETRY_MS: '100',
    RPC_URL,
    CHAIN_ID,
    ADDRESS_BOOK,
  })
  const payer = await chain.fundedPayer(1_000_000n)
  const payTo = freshAddress()

  await admin.publish([await signCharge(chain.usdc, payer, { payTo })])
  const [settled] = await admin.paymentsWhen('the payment settled', (payments) => payments.some(inState('settled')))
  t.ok(relayed, 'the facilitator sent the transfer')
  t.match(settled, { settlement: 'settled', txHash: relayed, settleError: null }, "settled with the facilitator's transaction")
  t.equal(calls.length, 2, 'the 502 was retried once, and the refusal was final')
  t.equal(await chain.balanceOf(payTo), 10_000n, 'paid once')
})
