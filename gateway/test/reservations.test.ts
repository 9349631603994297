import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import t from 'tap'
import { eip3009Abi, createChainClients, MULTICALL3_ADDRESS } from '@ats/chain'
import { startDevnet } from '@ats/devnet'
import { freshNamespace } from '@ats/service-kit/testing'
import { createTestClient, createWalletClient, erc20Abi, http, parseSignature, type Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { createPayerChain, createPaymentVerifier, createReservations, decodeXPayment, type Payment } from '../src/payments/index.ts'
import { createPaymentIdStore } from '../src/payments/paymentIds.ts'
import { nowS, paymentFixtures, redisPair, type Message } from './paymentFixtures.ts'

/**
 * Reservations of unsettled payments on the devnet and the test Redis, as two gateway
 * replicas use them: each verifier has its own Redis client and its own cache of balances.
 */
const devnet = await startDevnet({ port: 0, addressBookPath: false, accounts: 3, snapshot: true })
t.teardown(() => devnet.stop())
const [redisA, redisB] = redisPair(t)
const namespace = await freshNamespace(t)

const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
const funder = privateKeyToAccount(devnet.accounts[1]!.privateKey)
const relayer = createWalletClient({ account: privateKeyToAccount(devnet.accounts[0]!.privateKey), transport: http(devnet.rpcUrl) })
const payTo = devnet.accounts[2]!.address
const { terms, xPayment, signed } = paymentFixtures({ usdc, payTo, chainId: devnet.chainId, payer: funder })
const { publicClient } = createChainClients({ rpcUrl: devnet.rpcUrl, chainId: devnet.chainId })

/** a gateway replica's verifier: its own Redis client, its own balance cache (60 s: only a stale mark refreshes it) */
const replica = (redis: typeof redisA, ttlMs = 60_000) => {
  const chain = createPayerChain({ publicClient, asset: usdc, ttlMs })
  const reservations = createReservations({ redis, chain, namespace })
  const verifier = createPaymentVerifier({ requirements: terms, reservations })
  return { verifier, reservations }
}
const [a, b] = [replica(redisA), replica(redisB)]

async function fundedAccount(amount: bigint) {
  const account = privateKeyToAccount(generatePrivateKey())
  const wallet = createWalletClient({ account: funder, transport: http(devnet.rpcUrl) })
  await publicClient.waitForTransactionReceipt({
    hash: await wallet.writeContract({
      chain: null,
      address: usdc,
      abi: erc20Abi,
      functionName: 'transfer',
      args: [account.address, amount],
    }),
  })
  return account
}

const payment = async (payer: PrivateKeyAccount, over: Partial<Message> = {}) => {
  const { message, signature } = await signed(payer, over)
  return { message, signature, payment: decodeXPayment(xPayment(message, signature)) }
}

/** settles a signed payment on chain, as admin would */
async function settle({ message, signature }: { message: Message; signature: Hex }) {
  const { r, s, v } = parseSignature(signature)
  const args = [message.from, message.to, message.value, message.validAfter, message.validBefore, message.nonce, Number(v), r, s] as const
  const hash = await relayer.writeContract({ chain: null, address: usdc, abi: eip3009Abi, functionName: 'transferWithAuthorization', args })
  await publicClient.waitForTransactionReceipt({ hash })
}

const outcome = (verify: Promise<unknown>) =>
  verify.then(
    () => 'ok',
    (error: Error) => error.message,
  )

t.test('payments that together exceed the balance: across two replicas, only what the balance covers is admitted', async (t) => {
  const payer = await fundedAccount(30_000n)
  const payments: Payment[] = await Promise.all([0, 1, 2, 3].map(async () => (await payment(payer, { value: 15_001n })).payment))
  const results = await Promise.all(payments.map((p, i) => outcome([a, b][i % 2]!.verifier.verify(p, nowS()))))
  t.equal(results.filter((r) => r === 'ok').length, 1, 'one admitted')
  for (const r of results.filter((r) => r !== 'ok')) {
    t.match(
      r,
      new RegExp(
        `^insufficient funds: ${payer.address} holds 30000, of which 15001 is reserved by unsettled payments; the payment is 15001$`,
      ),
    )
  }
  t.equal(await outcome(a.verifier.verify((await payment(payer, { value: 14_999n })).payment, nowS())), 'ok', 'what is left is admitted')
})

t.test('a settled payment stops reserving; a replica whose cached balance predates that settlement reads the balance again', async (t) => {
  const payer = await fundedAccount(30_000n)
  const first = await payment(payer, { value: 15_001n })
  t.equal(await outcome(a.verifier.verify(first.payment, nowS())), 'ok', 'replica A caches the balance: 30000')
  await settle(first)
  // B: 14999 left, 15001 reserved; the reservation's authorization is used on chain, so it ends
  const second = await payment(payer, { value: 14_999n })
  t.equal(await outcome(b.verifier.verify(second.payment, nowS())), 'ok', 'the settled reservation ended: the rest is admitted')
  // A's cached 30000 minus the 14999 reserved would admit 10000 more; the balance is read again
  const third = await payment(payer, { value: 10_000n })
  t.match(
    await outcome(a.verifier.verify(third.payment, nowS())),
    new RegExp(`^insufficient funds: ${payer.address} holds 14999, of which 14999 is reserved`),
  )
})

t.test("an uncharged payment's reservation is released; an authorization already used on chain is refused", async (t) => {
  const payer = await fundedAccount(20_000n)
  const first = await payment(payer, { value: 15_000n })
  t.equal(await outcome(a.verifier.verify(first.payment, nowS())), 'ok')
  t.match(await outcome(b.verifier.verify((await payment(payer)).payment, nowS())), /^insufficient funds: .* of which 15000 is reserved/)
  await a.reservations.release(payer.address, first.message.nonce, pino({ level: 'silent' }))
  t.equal(await outcome(b.verifier.verify((await payment(payer)).payment, nowS())), 'ok', 'released: 10000 of 20000 admitted')

  const spent = await payment(payer, { to: payer.address, value: 0n })
  await settle(spent)
  const reused = await payment(payer, { nonce: spent.message.nonce })
  t.match(
    await outcome(a.verifier.verify(reused.payment, nowS())),
    new RegExp(`^nonce already used on chain: authorization ${spent.message.nonce} of ${payer.address} was used or canceled`),
  )
})

t.test('the authorization states of one tick are read in one Multicall3 call; used and unused told apart', async (t) => {
  const payer = await fundedAccount(1_000n)
  const spent = [await payment(payer, { to: payer.address, value: 0n }), await payment(payer, { to: payer.address, value: 0n })]
  for (const p of spent) await settle(p)
  const fresh = await Promise.all([1, 2, 3].map(() => payment(payer)))
  const calls: Array<{ to: string; data?: string }> = []
  const counted = {
    ...publicClient,
    request: ((args: { method: string; params: [{ to: string; data?: string }, string] }) => {
      if (args.method === 'eth_call') calls.push(args.params[0])
      return publicClient.request(args as never)
    }) as typeof publicClient.request,
  }
  const chain = createPayerChain({ publicClient: counted, asset: usdc })
  const nonces = [spent[0]!, fresh[0]!, spent[1]!, fresh[1]!, fresh[2]!].map((p) => p.message.nonce)
  const read = () => Promise.all(nonces.map((nonce) => chain.authorizationUsed(payer.address, nonce)))
  t.same(await read(), [true, false, true, false, false], 'the two settled authorizations are used, the three others not')
  t.same(calls, [{ to: MULTICALL3_ADDRESS, data: calls[0]?.data }], 'five reads, one eth_call, to Multicall3')

  calls.length = 0
  t.equal(await chain.authorizationUsed(payer.address, nonces[0]!), true)
  t.same(
    calls.map((call) => call.to),
    [usdc],
    'a lone read is a plain eth_call to USDC',
  )

  // a chain without Multicall3: every read of the batch on its own, the same answers
  const anvil = createTestClient({ mode: 'anvil', transport: http(devnet.rpcUrl) })
  const code = await publicClient.getCode({ address: MULTICALL3_ADDRESS })
  t.ok(code && code.length > 2, 'the devnet has Multicall3 at its Arbitrum One address')
  await anvil.setCode({ address: MULTICALL3_ADDRESS, bytecode: '0x' })
  t.teardown(() => anvil.setCode({ address: MULTICALL3_ADDRESS, bytecode: code! }))
  calls.length = 0
  t.same(await read(), [true, false, true, false, false], 'without Multicall3: the same answers')
  t.same(
    calls.map((call) => call.to),
    [MULTICALL3_ADDRESS, usdc, usdc, usdc, usdc, usdc],
    'after the batch call failed, one call each',
  )
})

t.test('a payment id reserves once: its repeats reserve nothing again, nor does a new payment under it (refused)', async (t) => {
  const payer = await fundedAccount(25_000n)
  const ids = createPaymentIdStore({ redis: redisA, reservations: a.reservations, namespace, ttlMs: 60_000 })
  const first = await payment(payer, { value: 12_000n })
  t.match(await ids.claim(payer.address, 'order-0001-abcdef', 'fp', first.payment), { kind: 'first' })
  t.match(await ids.claim(payer.address, 'order-0001-abcdef', 'fp', first.payment), { kind: 'repeat' }, 'the first payment again')
  t.match(
    await ids.claim(payer.address, 'order-0001-abcdef', 'fp', (await payment(payer, { value: 12_000n })).payment),
    { kind: 'other_payment' },
    'a new payment',
  )
  // 12000 reserved once, not three times: 12000 more fits in 25000
  t.equal(await outcome(b.verifier.verify((await payment(payer, { value: 12_000n })).payment, nowS())), 'ok')
  t.match(await outcome(b.verifier.verify((await payment(payer)).payment, nowS())), /^insufficient funds: .* of which 24000 is reserved/)
})

t.test(
  'reserves racing prunes and settlements on two replicas, round after round: exactly what the balance covers is admitted, the rest refused naming what is reserved',
  async (t) => {
    // replicas that cache balances 5 s, as gateways do: loads in flight meet prunes
    const [c, d] = [replica(redisA, 5_000), replica(redisB, 5_000)]
    const covered = 12
    const sent = 36
    for (let round = 1; round <= 8; round++) {
      const payer = await fundedAccount(10_000n * BigInt(covered))
      const payments = await Promise.all(Array.from({ length: sent }, () => payment(payer)))
      // admin's part: every admitted payment settled on chain as soon as it is admitted, one at a time
      let settling: Promise<unknown> = Promise.resolve()
      const settlements: string[] = []
      const results = await Promise.all(
        payments.map(async (p, i) => {
          // bursts of six at once, every 25 ms: loads of the balance in flight meet prunes
          await sleep(Math.floor(i / 6) * 25)
          const result = await outcome([a, b, c, d][i % 4]!.verifier.verify(p.payment, nowS()))
          if (result === 'ok') {
            settling = settling.then(() =>
              settle(p).then(
                () => settlements.push('settled'),
                (error: Error) => settlements.push(error.message.split('\n')[0]!),
              ),
            )
          }
          return result
        }),
      )
      await settling
      const admitted = results.filter((r) => r === 'ok').length
      const refused = results.filter((r) => r !== 'ok')
      t.equal(admitted, covered, `round ${round}: ${covered} admitted`)
      t.same(
        settlements,
        Array(admitted).fill('settled'),
        `round ${round}: every admitted payment settled (a payment beyond the balance reverts)`,
      )
      t.same(
        refused.filter((r) => !r.startsWith('insufficient funds')),
        [],
        `round ${round}: every other payment is refused for insufficient funds, none fails (a 503)`,
      )
      t.same(
        refused.filter((r) => !new RegExp(`^insufficient funds: ${payer.address} holds \\d+, of which \\d+ is reserved`).test(r)),
        [],
        `round ${round}: every refusal names what is reserved`,
      )
    }
  },
)
