import { eventually, scrapeMetric } from '@ats/service-kit/testing'
import t from 'tap'
import { parseAbiItem, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { startPaidFleet } from '../fleet.ts'

/**
 * Settlement keeps up with paid traffic: through the gateway, eight payers pay for requests side
 * by side for a while, with real x402 payments and the admin settling on the devnet with its
 * default settings. Every payment is on chain within 10 s of its answer, in fewer transactions
 * than payments, and none fails or expires.
 */
const PAYERS = 8
const REQUESTS_PER_PAYER = 30
/** each payer pays for a request this often: 8 payers, 16 paid requests a second for 15 s */
const EVERY_MS = 500
const authorizationUsed = parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)')

t.test('8 payers under sustained paid load: every payment settled within 10 s of its answer, in fewer transactions', async (t) => {
  const fleet = await startPaidFleet(t, { adminEnv: { SETTLEMENT_ENABLED: 'true' } })
  const { publicClient, devnet } = fleet
  // devnet accounts 1-8 hold USDC; account 9 is PAY_TO
  const payers = Array.from({ length: PAYERS }, (_, i) => privateKeyToAccount(devnet.accounts[i + 1]!.privateKey))
  const before = await fleet.balanceOf(fleet.payTo)
  const fromBlock = await publicClient.getBlockNumber({ cacheTime: 0 })

  // signed before the load, so that the load is the requests alone
  const headers = await Promise.all(
    payers.map((payer) => Promise.all(Array.from({ length: REQUESTS_PER_PAYER }, () => fleet.pay({ payer })))),
  )
  const nonceOf = (header: string) =>
    (JSON.parse(Buffer.from(header, 'base64').toString('utf8')).payload.authorization.nonce as string).toLowerCase()
  /** when each payment was answered (ms, this process's clock), by nonce */
  const answeredAt = new Map<string, number>()
  /** when each payment was first seen used on chain */
  const settledAt = new Map<string, number>()
  const refused: string[] = []

  let loading = true
  // watches the chain while the load runs and after: AuthorizationUsed of the payers since the start
  const watch = (async () => {
    while (loading || settledAt.size < answeredAt.size) {
      const logs = await publicClient.getLogs({ event: authorizationUsed, args: { authorizer: payers.map((p) => p.address) }, fromBlock })
      const now = Date.now()
      for (const log of logs) if (!settledAt.has(log.args.nonce!.toLowerCase())) settledAt.set(log.args.nonce!.toLowerCase(), now)
      if (!loading && Date.now() - Math.max(...answeredAt.values()) > 30_000) return
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  })()

  const started = Date.now()
  await Promise.all(
    headers.map(async (payerHeaders, p) => {
      for (const [i, header] of payerHeaders.entries()) {
        // paced: request i of every payer goes at i × EVERY_MS (the payers staggered within it)
        const due = started + i * EVERY_MS + (p * EVERY_MS) / PAYERS
        if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()))
        const res = await fleet.request('/agent/skills', { headers: { 'x-payment': header } })
        if (res.status === 200) answeredAt.set(nonceOf(header), Date.now())
        else refused.push(`${res.status} ${JSON.stringify(res.body)}`)
      }
    }),
  )
  loading = false
  await watch

  const total = PAYERS * REQUESTS_PER_PAYER
  t.same(refused, [], 'every paid request answered 200')
  t.equal(answeredAt.size, total)
  const lags = [...answeredAt].map(([nonce, at]) => (settledAt.get(nonce) ?? Number.POSITIVE_INFINITY) - at)
  t.equal(lags.filter((lag) => lag === Number.POSITIVE_INFINITY).length, 0, 'every payment on chain')
  const slowest = Math.max(...lags)
  t.ok(slowest <= 10_000, `every payment on chain within 10 s of its answer (the slowest: ${slowest} ms)`)

  const logs = await publicClient.getLogs({ event: authorizationUsed, args: { authorizer: payers.map((p) => p.address) }, fromBlock })
  const hashes = [...new Set(logs.map((log) => log.transactionHash as Hex))]
  t.ok(hashes.length < total, `${hashes.length} transactions for ${total} payments`)
  const receipts = await Promise.all(hashes.map((hash) => publicClient.getTransactionReceipt({ hash })))
  t.ok(
    receipts.every((r) => r.status === 'success'),
    'every settlement transaction succeeded',
  )
  const gas = receipts.reduce((sum, r) => sum + r.gasUsed, 0n)
  t.comment(`gas per settled payment: ${gas / BigInt(total)} (${hashes.length} transactions for ${total} payments)`)
  t.equal(await fleet.balanceOf(fleet.payTo), before + BigInt(total) * 10_000n, 'PAY_TO received every payment once')

  // the ledger records a batch once its receipt is read: a moment after its logs are on chain
  const counted = await eventually('the ledger to record every settlement', async () => {
    const metric = await scrapeMetric(fleet.admin.url, 'ats_payments_total')
    return (metric.settled ?? 0) + (metric.failed ?? 0) >= total ? metric : undefined
  })
  t.match(counted, { charged: total, settled: total, failed: 0 }, 'the ledger has every payment settled, none failed or expired')
})
