import { createServer, type Server } from 'node:http'
import { once } from 'node:events'
import { startTestDevnet } from '@ats/devnet'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { startPaidFleet } from './fleet.ts'

/**
 * Issue 23, item 5: paid routes had no rate limit, and each validly signed payment from a fresh
 * unfunded wallet cost a balanceOf RPC call. The gateway reaches the devnet through a proxy here
 * that counts the balanceOf calls it forwards; client addresses come from X-Forwarded-For
 * (TRUST_PROXY names the test's own loopback address).
 */
const balanceOf = '0x70a08231'
const balanceReads = new Map<string, number>()

/** a JSON-RPC proxy in front of anvil that counts eth_call balanceOf(address) by address */
async function countingRpc(target: string): Promise<Server> {
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks).toString()
    const calls = [JSON.parse(body)].flat() as Array<{ method: string; params?: Array<{ data?: string; input?: string }> }>
    for (const call of calls) {
      const data = call.method === 'eth_call' ? (call.params?.[0]?.data ?? call.params?.[0]?.input) : undefined
      if (data?.startsWith(balanceOf)) {
        const owner = `0x${data.slice(34, 74)}`.toLowerCase()
        balanceReads.set(owner, (balanceReads.get(owner) ?? 0) + 1)
      }
    }
    const answer = await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    res.writeHead(answer.status, { 'content-type': 'application/json' }).end(await answer.text())
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => server.close())
  return server
}

const chain = await startTestDevnet(t)
const proxy = await countingRpc(chain.devnet.rpcUrl)
const rpcUrl = `http://127.0.0.1:${(proxy.address() as { port: number }).port}`
const fleet = await startPaidFleet(t, {
  chain: { ...chain, chainEnv: { ...chain.chainEnv, RPC_URL: rpcUrl } },
  gatewayEnv: { TRUST_PROXY: '127.0.0.1', AUTH_FAILURE_LIMIT: '5', PAID_RATE_LIMIT_PER_ADDRESS: '8', PAID_RATE_LIMIT_PER_PAYER: '3' },
  // settlement reads balances too: only the gateway's reads are counted here
  adminEnv: { SETTLEMENT_ENABLED: 'false' },
})
const { request, pay, devnet } = fleet
const from = (address: string, payment?: string) => ({
  headers: { 'x-forwarded-for': address, ...(payment ? { 'x-payment': payment } : {}) },
})

t.test('a payer over its paid limit gets 429 with retry-after, from any address; another payer does not', async (t) => {
  for (let i = 1; i <= 3; i++) t.equal((await request('/agent/skills', from('203.0.113.10', await pay()))).status, 200, `paid request ${i}`)
  const over = await request('/agent/skills', from('203.0.113.10', await pay()))
  t.equal(over.status, 429)
  t.match(over.body, { error: /^rate limit exceeded: 3 paid requests per 60 s for this payer; retry in \d+ s$/ })
  t.ok(Number(over.headers.get('retry-after')) > 0, 'retry-after says when')
  t.equal((await request('/agent/skills', from('203.0.113.11', await pay()))).status, 429, "the count is the payer's, whatever its address")
  const other = privateKeyToAccount(devnet.accounts[2]!.privateKey)
  t.equal(
    (await request('/agent/skills', from('203.0.113.11', await pay({ payer: other })))).status,
    200,
    'another payer has its own count',
  )
})

t.test('a client address over its paid limit gets 429 before any payment check; another address does not', async (t) => {
  for (let i = 1; i <= 8; i++) t.equal((await request('/agent/skills', from('203.0.113.20'))).status, 402, `request ${i} is asked to pay`)
  const over = await request('/agent/skills', from('203.0.113.20', await pay()))
  t.equal(over.status, 429)
  t.match(over.body, { error: /^rate limit exceeded: 8 paid requests per 60 s for this client address; retry in \d+ s$/ })
  t.ok(Number(over.headers.get('retry-after')) > 0)
  t.equal((await request('/agent/skills', from('203.0.113.21'))).status, 402, 'another address is not affected')
})

t.test('a flood of unfunded payers from one address costs one balance read each until it is refused, then none', async (t) => {
  const wallets = Array.from({ length: 15 }, () => privateKeyToAccount(generatePrivateKey()))
  const reads = () => wallets.reduce((sum, wallet) => sum + (balanceReads.get(wallet.address.toLowerCase()) ?? 0), 0)
  const statuses: number[] = []
  let refused: Awaited<ReturnType<typeof request>> | undefined
  for (const wallet of wallets) {
    const res = await request('/agent/skills', from('203.0.113.30', await pay({ payer: wallet })))
    statuses.push(res.status)
    if (res.status === 429) refused ??= res
    else t.match(res.body.error, /^insufficient funds/)
  }
  t.same(statuses, [...Array(5).fill(402), ...Array(10).fill(429)], 'five failed payments, then 429')
  t.match(refused?.body, { error: /^too many failed authentications from this address; retry in \d+ s$/ })
  t.ok(Number(refused?.headers.get('retry-after')) > 0)
  t.equal(reads(), 5, 'the refused ten cost no RPC call')
  const funded = await request(
    '/agent/skills',
    from('203.0.113.31', await pay({ payer: privateKeyToAccount(devnet.accounts[3]!.privateKey) })),
  )
  t.equal(funded.status, 200, 'another address pays as usual')
})
