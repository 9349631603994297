import { decodePaymentRequiredHeader, decodePaymentResponseHeader, decodePaymentSignatureHeader } from '@x402/core/http'
import type { Network } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment, x402Client } from '@x402/fetch'
import { createPublicClient, type Hex, http, parseAbiItem } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { runBench, startBase, startPaidStack } from './fleet.ts'
import { positiveSetting } from './harness/settings.ts'
import { assertPortFree, childrenNamed, cpuMicros, pinLoadGenerator, pinToServerCore, start } from './processes.ts'

/**
 * pnpm bench:reference: the x402 reference seller stack beside our paid route, on one devnet, in
 * one run, under the same buyer. The reference: an Express app with @x402/express's payment
 * middleware and the reference facilitator (@x402/core + @x402/evm's exact scheme) in its process
 * (bench/referenceSeller.ts), settling each payment on chain inside the request. Ours: the gateway's
 * paid GET /agent/skills, its charges recorded by the admin service, which settles them on chain
 * afterwards from its server wallet. Both sell the route at the price our gateway asks.
 *
 * The buyer is the reference client (@x402/fetch with @x402/evm's exact scheme): for each paid
 * request it asks, gets the 402, signs a fresh EIP-3009 authorization and asks again.
 * BENCH_CONCURRENCY loops pay for BENCH_SECONDS per stack after a warm-up of 2 s (whose payments are
 * on chain before the run starts), loopback only.
 * Where taskset exists the buyer runs on core 0 and the servers and anvil on core 1.
 *
 * Per stack: paid requests/s, p50/p99 of a whole paid request (402 and paid retry), the servers'
 * CPU per paid request (gateway + admin; the reference seller) during the run and until every
 * payment is settled, anvil's and the buyer's (this process's) CPU per paid request, and how long after the run every payment of
 * it is on chain (AuthorizationUsed for each of the run's nonces). The bench fails unless both
 * stacks served paid requests and every one of them was settled.
 *
 * Settings (environment):
 *   BENCH_SECONDS       10    length of each stack's run, s
 *   BENCH_CONCURRENCY   10    paying loops
 *   BENCH_SETTLE_WAIT   600   how long to wait for the payments to reach the chain, s
 *   BENCH_DEVNET_PORT   8693  the devnet's (anvil's) port
 */
const seconds = positiveSetting('BENCH_SECONDS', 10)
const concurrency = positiveSetting('BENCH_CONCURRENCY', 10)
const settleWait = positiveSetting('BENCH_SETTLE_WAIT', 600)
const devnetPort = Number(process.env.BENCH_DEVNET_PORT ?? 8693)

const ports = { gateway: 3920, ops: 3921, admin: 3922, reference: 3923 }
const WARM_UP_SECONDS = 2
const authorizationUsed = parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)')

const pinned = pinLoadGenerator()

interface Stack {
  name: string
  url: string
  /** the server processes whose CPU counts */
  pids: number[]
}

interface RunResult {
  paid: number
  failed: number
  latencies: number[]
  nonces: Set<Hex>
  elapsedMs: number
}

/** The reference buyer paying `url` from `concurrency` loops for `runSeconds`: the nonce and latency of each paid request. */
async function pay(payFetch: typeof fetch, nonceOf: (response: Response) => Hex | undefined, url: string, runSeconds: number) {
  const result: RunResult = { paid: 0, failed: 0, latencies: [], nonces: new Set(), elapsedMs: 0 }
  const started = performance.now()
  const deadline = started + runSeconds * 1000
  const loop = async () => {
    while (performance.now() < deadline) {
      const sent = performance.now()
      try {
        const res = await payFetch(url)
        const header = res.headers.get('payment-response')
        await res.body?.cancel()
        const nonce = nonceOf(res)
        if (res.status === 200 && header && nonce && decodePaymentResponseHeader(header).success) {
          result.paid++
          result.latencies.push(performance.now() - sent)
          result.nonces.add(nonce)
        } else result.failed++
      } catch {
        result.failed++
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, loop))
  result.elapsedMs = performance.now() - started
  return result
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? Number.NaN
const cpuOf = (pids: number[]) => pids.reduce((sum, pid) => sum + cpuMicros(pid), 0)

async function main() {
  for (const port of Object.values(ports)) await assertPortFree(port, `the bench needs ${Object.values(ports).join(', ')}`)
  const base = await startBase({ devnetPort })
  const { devnet } = base
  const [anvil] = childrenNamed('anvil')
  if (anvil === undefined) throw new Error('the devnet has no anvil process')
  if (pinned && !pinToServerCore(anvil)) throw new Error(`taskset could not move anvil (pid ${anvil}) to the servers' core`)
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')?.address
  if (!usdc) throw new Error('the devnet address book has no USDC')
  const network = `eip155:${devnet.chainId}` as Network
  const payTo = devnet.accounts[9]!.address
  const payer = privateKeyToAccount(devnet.accounts[1]!.privateKey) // 1,000,000 USDC
  // each stack settles from an account of its own, so their transactions never share a nonce
  const ourSettler = devnet.accounts[0]!.privateKey
  const referenceFacilitator = devnet.accounts[8]!.privateKey

  const { admin, gateway } = await startPaidStack(base, ports, { serverWalletKey: ourSettler, payTo })
  const ours: Stack = { name: 'ours', url: `http://127.0.0.1:${ports.gateway}/agent/skills`, pids: [gateway.pid, admin.pid] }

  // the reference sells the same route at the price our gateway asks
  const unpaid = await fetch(ours.url)
  const required = unpaid.headers.get('payment-required')
  await unpaid.body?.cancel()
  if (unpaid.status !== 402 || !required) throw new Error(`GET /agent/skills without payment answered ${unpaid.status}, not 402`)
  const ask = decodePaymentRequiredHeader(required).accepts.find((a) => a.scheme === 'exact' && a.network === network)
  if (!ask) throw new Error(`the gateway asks no exact payment on ${network}`)
  const seller = await start(
    'bench/referenceSeller.ts',
    {
      PORT: String(ports.reference),
      RPC_URL: devnet.rpcUrl,
      CHAIN_ID: String(devnet.chainId),
      FACILITATOR_PRIVATE_KEY: referenceFacilitator,
      PAY_TO: payTo,
      ASSET: ask.asset,
      AMOUNT: ask.amount,
      EXTRA: JSON.stringify(ask.extra ?? {}),
    },
    'pipe',
  )
  const reference: Stack = { name: 'reference', url: `${seller.address}/agent/skills`, pids: [seller.pid] }

  // the reference buyer; the inner fetch notes the nonce each paid retry spends
  const spent = new WeakMap<Response, Hex>()
  const recordingFetch: typeof fetch = async (input, init) => {
    const request = new Request(input, init)
    const signature = request.headers.get('payment-signature')
    const response = await fetch(request)
    if (signature) {
      const authorization = (decodePaymentSignatureHeader(signature).payload as { authorization: { nonce: Hex } }).authorization
      spent.set(response, authorization.nonce)
    }
    return response
  }
  const client = x402Client.fromConfig({
    schemes: [{ network, client: new ExactEvmScheme(payer) }],
    spendControls: { allowedAssets: [{ network, asset: ask.asset, maxAmountPerPayment: ask.amount }] },
  })
  const payFetch = wrapFetchWithPayment(recordingFetch, client)
  const nonceOf = (response: Response) => spent.get(response)

  const chain = createPublicClient({ transport: http(devnet.rpcUrl) })
  /** ms from `endedAt` until every nonce of `nonces` is used on chain, polling AuthorizationUsed from `fromBlock`; NaN when the wait runs out */
  const settledAfter = async (nonces: Set<Hex>, fromBlock: bigint, endedAt: number) => {
    const waitUntil = performance.now() + settleWait * 1000
    const missing = new Set([...nonces].map((n) => n.toLowerCase()))
    while (performance.now() < waitUntil) {
      const logs = await chain.getLogs({ event: authorizationUsed, args: { authorizer: payer.address }, fromBlock })
      for (const log of logs) missing.delete(log.args.nonce!.toLowerCase())
      if (missing.size === 0) return { ms: performance.now() - endedAt, missing: 0 }
      await new Promise((r) => setTimeout(r, 200))
    }
    return { ms: Number.NaN, missing: missing.size }
  }

  console.log(
    `the reference buyer (@x402/fetch, @x402/evm exact) at ${concurrency} loops, ${seconds} s per stack after ${WARM_UP_SECONDS} s of warm-up; price ${ask.amount} base units of ${ask.asset}${pinned ? '; buyer on core 0, servers and anvil on core 1' : ''}`,
  )
  const rows: string[] = []
  let failures = ''
  for (const stack of [ours, reference]) {
    // the warm-up's payments reach the chain first, so the run's settlements and CPU are its own
    const warmUp = await pay(payFetch, nonceOf, stack.url, WARM_UP_SECONDS)
    if (Number.isNaN((await settledAfter(warmUp.nonces, 0n, performance.now())).ms))
      throw new Error(`${stack.name}: the warm-up's payments never reached the chain`)
    const fromBlock = await chain.getBlockNumber()
    const cpuBefore = cpuOf(stack.pids)
    const anvilBefore = cpuMicros(anvil)
    const buyerBefore = process.cpuUsage()
    const run = await pay(payFetch, nonceOf, stack.url, seconds)
    const endedAt = performance.now()
    const buyer = process.cpuUsage(buyerBefore)
    const cpuRun = cpuOf(stack.pids) - cpuBefore
    const settled = await settledAfter(run.nonces, fromBlock, endedAt)
    const cpuAll = cpuOf(stack.pids) - cpuBefore
    const anvilCpu = cpuMicros(anvil) - anvilBefore
    const sorted = run.latencies.sort((a, b) => a - b)
    const perPaid = (micros: number) => (micros / 1000 / run.paid).toFixed(2)
    rows.push(
      `| ${stack.name} | ${((run.paid * 1000) / run.elapsedMs).toFixed(1)} | ${percentile(sorted, 50).toFixed(1)} | ${percentile(sorted, 99).toFixed(1)} | ${perPaid(cpuRun)} | ${perPaid(cpuAll)} | ${perPaid(anvilCpu)} | ${perPaid(buyer.user + buyer.system)} | ${Number.isNaN(settled.ms) ? `not settled: ${settled.missing} missing after ${settleWait} s` : `${(settled.ms / 1000).toFixed(2)} s`} | ${run.paid} paid, ${run.failed} failed |`,
    )
    if (run.paid === 0) failures += `${stack.name} served no paid request\n`
    if (run.nonces.size !== run.paid) failures += `${stack.name}: ${run.nonces.size} distinct nonces for ${run.paid} paid requests\n`
    if (settled.missing > 0)
      failures += `${stack.name}: ${settled.missing} of ${run.nonces.size} payments not on chain after ${settleWait} s\n`
  }
  console.log(
    '| stack | paid req/s | p50 ms | p99 ms | server CPU ms/paid (run) | server CPU ms/paid (until settled) | anvil CPU ms/paid | buyer CPU ms/paid | all on chain after the run | requests |',
  )
  console.log('|---|---|---|---|---|---|---|---|---|---|')
  for (const row of rows) console.log(row)
  if (failures) throw new Error(`${failures}admin warnings and errors:\n${admin.problems()}`)
}

await runBench(main)
