import autocannon from 'autocannon'
import { createPublicClient, createWalletClient, erc20Abi, http, parseAbiItem, type Address, type Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { runBench, startBase, startPaidStack } from './fleet.ts'
import { positiveSetting } from './harness/settings.ts'
import { signPayments, type PaymentSigner } from './payments.ts'
import { assertPortFree, childrenNamed, cpuMicros } from './processes.ts'

/**
 * pnpm bench:settlement: does settlement keep up with the paid edge? The gateway's paid GET
 * /agent/skills under BENCH_RATE paid requests a second from 8 payers for BENCH_SECONDS (each
 * request carries a fresh pre-signed EIP-3009 payment), the admin service settling on the devnet
 * from its server wallet with its default settings (batches, pipelined). A watcher reads the
 * chain's AuthorizationUsed logs every 250 ms and notes when each payment is first seen used.
 *
 * Reports: paid req/s, settled/s (payments of the run over the time from its first payment on
 * chain to its last), max and p99 of answer → on chain, the settlement transactions and gas per
 * settled payment, the CPU of gateway, admin and anvil per paid request; then a payer holding $5
 * paying 100 requests a second for 10 s: how many of its requests were refused for reservations
 * (unsettled payments holding its balance) while its balance still covered them. Each aim is
 * printed met or not met; the bench fails when payments are missing on chain after
 * BENCH_SETTLE_WAIT.
 *
 * Settings (environment):
 *   BENCH_SECONDS       60    length of the run, s
 *   BENCH_RATE          150   paid requests a second (8 payers, round-robin)
 *   BENCH_CONNECTIONS   32    connections of the load generator
 *   BENCH_SETTLE_WAIT   120   how long to wait after the run for its payments to reach the chain, s
 *   BENCH_DEVNET_PORT   8694  the devnet's (anvil's) port
 */
const seconds = positiveSetting('BENCH_SECONDS', 60)
const rate = positiveSetting('BENCH_RATE', 150)
const connections = positiveSetting('BENCH_CONNECTIONS', 32)
const settleWait = positiveSetting('BENCH_SETTLE_WAIT', 120)
const devnetPort = Number(process.env.BENCH_DEVNET_PORT ?? 8694)

const ports = { gateway: 3930, ops: 3931, admin: 3932 }
const PAYERS = 8
const PRICE = 10_000n // the gateway's default PAYMENT_PRICE, $0.01
const authorizationUsed = parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)')

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? Number.NaN
const verdict = (met: boolean) => (met ? 'met' : 'NOT MET')
const nonceOf = (header: string) =>
  (JSON.parse(Buffer.from(header, 'base64').toString('utf8')).payload.authorization.nonce as string).toLowerCase()

interface Paced {
  /** answer time (ms, performance.now) of each accepted payment, by nonce */
  answered: Map<string, number>
  /** the other answers: status and error, in order */
  refused: Array<{ status: number; error: string; acceptedBefore: number }>
  elapsedMs: number
}

/** autocannon at `perSecond` requests a second for `runSeconds`, each request with the next header of `headers`. */
async function paced(url: string, headers: string[], perSecond: number, runSeconds: number): Promise<Paced> {
  const result: Paced = { answered: new Map(), refused: [], elapsedMs: 0 }
  let next = 0
  const started = performance.now()
  await new Promise<void>((resolve, reject) => {
    autocannon(
      {
        url,
        connections: Math.min(connections, perSecond),
        overallRate: perSecond,
        duration: runSeconds,
        requests: [
          {
            setupRequest: (request, context) => {
              const header = headers[next++]
              if (!header) throw new Error('the bench ran out of signed payments')
              ;(context as { nonce?: string }).nonce = nonceOf(header)
              return { ...request, headers: { ...request.headers, 'x-payment': header } }
            },
            onResponse: (status, body, context) => {
              if (status === 200) result.answered.set((context as { nonce: string }).nonce, performance.now())
              else {
                const error = (() => {
                  try {
                    return String(JSON.parse(body).error)
                  } catch {
                    return body.slice(0, 200)
                  }
                })()
                result.refused.push({ status, error, acceptedBefore: result.answered.size })
              }
            },
          },
        ],
      },
      (error) => (error ? reject(error) : resolve()),
    )
  })
  result.elapsedMs = performance.now() - started
  return result
}

async function main() {
  for (const port of Object.values(ports)) await assertPortFree(port, `the bench needs ${Object.values(ports).join(', ')}`)
  const base = await startBase({ devnetPort })
  const { devnet } = base
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')?.address as Address | undefined
  if (!usdc) throw new Error('the devnet address book has no USDC')
  const payTo = devnet.accounts[9]!.address as Address
  const chain = createPublicClient({ transport: http(devnet.rpcUrl) })

  const { admin, gateway } = await startPaidStack(base, ports, { serverWalletKey: devnet.accounts[0]!.privateKey, payTo })
  const url = `http://127.0.0.1:${ports.gateway}/agent/skills`

  // devnet accounts 1-8 hold USDC; a fresh account gets $5 from account 1
  const payers: PaymentSigner[] = devnet.accounts
    .slice(1, 1 + PAYERS)
    .map((a) => ({ address: a.address as Address, privateKey: a.privateKey as Hex }))
  const smallKey = generatePrivateKey()
  const small: PaymentSigner = { address: privateKeyToAccount(smallKey).address, privateKey: smallKey }
  const funder = createWalletClient({ account: privateKeyToAccount(devnet.accounts[1]!.privateKey as Hex), transport: http(devnet.rpcUrl) })
  const funded = await funder.writeContract({
    chain: null,
    address: usdc,
    abi: erc20Abi,
    functionName: 'transfer',
    args: [small.address, 500n * PRICE],
  })
  await chain.waitForTransactionReceipt({ hash: funded })

  const now = BigInt(Math.floor(Date.now() / 1000))
  const sign = (signers: PaymentSigner[], count: number) =>
    signPayments({
      count,
      payers: signers,
      payTo,
      usdc,
      chainId: devnet.chainId,
      value: PRICE,
      validAfter: now - 60n,
      validBefore: now + 900n,
    })
  // valid 15 minutes (the gateway takes up to 20); a margin over the rate: autocannon may send a little more than asked
  const headers = sign(payers, Math.ceil(rate * seconds * 1.2) + 100)
  const smallHeaders = sign([small], 100 * 12)

  // the chain's view: when each authorization of these payers was first seen used, and by which transaction
  const seen = new Map<string, number>()
  const transactions = new Set<Hex>()
  let watching = true
  let fromBlock = await chain.getBlockNumber()
  const watcher = (async () => {
    while (watching) {
      const to = await chain.getBlockNumber()
      if (to >= fromBlock) {
        const logs = await chain.getLogs({
          event: authorizationUsed,
          args: { authorizer: [...payers, small].map((p) => p.address) },
          fromBlock,
          toBlock: to,
        })
        const at = performance.now()
        for (const log of logs) {
          if (!seen.has(log.args.nonce!.toLowerCase())) seen.set(log.args.nonce!.toLowerCase(), at)
          transactions.add(log.transactionHash!)
        }
        fromBlock = to + 1n
      }
      await new Promise((r) => setTimeout(r, 250))
    }
  })()

  const [anvil] = childrenNamed('anvil')
  const cpu = () => ({
    gateway: cpuMicros(gateway.pid),
    admin: cpuMicros(admin.pid),
    anvil: anvil === undefined ? Number.NaN : cpuMicros(anvil),
  })
  const cpuBefore = cpu()
  console.log(
    `the gateway's paid GET /agent/skills at ${rate} paid requests/s from ${PAYERS} payers for ${seconds} s; admin settles with its defaults`,
  )
  const run = await paced(url, headers, rate, seconds)
  const waitUntil = performance.now() + settleWait * 1000
  const missing = () => [...run.answered.keys()].filter((nonce) => !seen.has(nonce))
  while (missing().length > 0 && performance.now() < waitUntil) await new Promise((r) => setTimeout(r, 250))
  const runTransactions = new Set(transactions)
  const cpuAfter = cpu()

  // the $5 payer: 100 requests a second for 10 s; its balance covers 500 of them
  const smallRun = await paced(url, smallHeaders, 100, 10)
  // refused for reservations while the payments accepted so far, and every one still in flight, left room for it
  const wronglyRefused = smallRun.refused.filter((r) => /reserved/.test(r.error) && r.acceptedBefore + Math.min(connections, 100) < 500)
  watching = false
  await watcher

  const paid = run.answered.size
  const lags = [...run.answered].map(([nonce, at]) => (seen.get(nonce) ?? Number.NaN) - at).filter((lag) => !Number.isNaN(lag))
  const sorted = lags.sort((a, b) => a - b)
  const firstSeen = Math.min(...[...run.answered.keys()].map((nonce) => seen.get(nonce) ?? Number.POSITIVE_INFINITY))
  const lastSeen = Math.max(...[...run.answered.keys()].map((nonce) => seen.get(nonce) ?? 0))
  const paidPerSecond = (paid * 1000) / run.elapsedMs
  // from the first of the run's payments on chain to the last: the rate the chain took them at
  const settledPerSecond = (lags.length * 1000) / (lastSeen - firstSeen)
  const receipts = await Promise.all([...runTransactions].map((hash) => chain.getTransactionReceipt({ hash })))
  const gas = receipts.reduce((sum, r) => sum + r.gasUsed, 0n)
  const gasPerPayment = lags.length ? Number(gas / BigInt(lags.length)) : Number.NaN
  const maxLag = sorted.at(-1) ?? Number.NaN

  console.log(
    '| paid req/s | settled/s | answer → on chain, p99 / max | transactions | payments per transaction | gas per settled payment | requests |',
  )
  console.log('|---|---|---|---|---|---|---|')
  console.log(
    `| ${paidPerSecond.toFixed(1)} | ${settledPerSecond.toFixed(1)} | ${(percentile(sorted, 99) / 1000).toFixed(2)} s / ${(maxLag / 1000).toFixed(2)} s | ${runTransactions.size} | ${(lags.length / runTransactions.size).toFixed(1)} | ${gasPerPayment} | ${paid} paid, ${run.refused.length} refused |`,
  )
  const perPaid = (name: keyof typeof cpuBefore) => ((cpuAfter[name] - cpuBefore[name]) / 1000 / paid).toFixed(2)
  console.log(
    `CPU ms per paid request, run and settlement: gateway ${perPaid('gateway')}, admin ${perPaid('admin')}, anvil ${perPaid('anvil')}`,
  )
  console.log(`aim: settled/s at least paid req/s — ${verdict(paid > 0 && settledPerSecond >= paidPerSecond * 0.98)}`)
  console.log(`aim: gas per settled payment at most 45,000 — ${verdict(gasPerPayment <= 45_000)}`)
  console.log(`aim: every payment on chain within 10 s of its answer — ${verdict(maxLag <= 10_000 && missing().length === 0)}`)
  const smallRate = ((smallRun.answered.size + smallRun.refused.length) * 1000) / smallRun.elapsedMs
  console.log(
    `the $5 payer at 100 requests/s asked (${smallRate.toFixed(1)} answered a second): ${smallRun.answered.size} paid (its balance covers 500), ${smallRun.refused.length} refused, ${wronglyRefused.length} of them for reservations while its balance covered them — aim: none, ${verdict(wronglyRefused.length === 0)}`,
  )
  const problems = [
    ...(run.refused.length ? [`${run.refused.length} paid requests refused, e.g. ${run.refused[0]!.status} ${run.refused[0]!.error}`] : []),
    ...(missing().length ? [`${missing().length} of ${paid} payments not on chain ${settleWait} s after the run`] : []),
  ]
  if (problems.length) throw new Error(`${problems.join('\n')}\nadmin warnings and errors:\n${admin.problems()}`)
}

await runBench(main)
