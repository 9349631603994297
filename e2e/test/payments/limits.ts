import { randomBytes } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import { once } from 'node:events'
import { startTestDevnet } from '@ats/devnet'
import { startService } from '@ats/service-kit/testing'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { gatewayService } from '@ats/gateway/service'
import { startPaidFleet } from '../fleet.ts'
import { jsonRequest, type JsonRequestInit } from '../jsonRequest.ts'

/**
 * Limits of paid routes: per client address and per payer, and the lockouts after refusals. Each
 * validly signed payment from a fresh unfunded wallet costs a balanceOf RPC call: the gateway
 * reaches the devnet through a proxy here that counts the balanceOf calls it forwards. Client
 * addresses come from X-Forwarded-For (TRUST_PROXY names the test's own loopback address).
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

t.test('limits of paid routes per address and payer, and lockouts', async (t) => {
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
    for (let i = 1; i <= 3; i++)
      t.equal((await request('/agent/skills', from('203.0.113.10', await pay()))).status, 200, `paid request ${i}`)
    const over = await request('/agent/skills', from('203.0.113.10', await pay()))
    t.equal(over.status, 429)
    t.match(over.body, { error: /^rate limit exceeded: 3 paid requests per 60 s for this payer; retry in \d+ s$/ })
    t.ok(Number(over.headers.get('retry-after')) > 0, 'retry-after says when')
    t.equal(
      (await request('/agent/skills', from('203.0.113.11', await pay()))).status,
      429,
      "the count is the payer's, whatever its address",
    )
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

  // A second gateway of the fleet with roomy rate limits and low lockout thresholds: the lockouts
  // themselves are what these tests look at
  const lockouts = await startService(t, gatewayService, {
    ...fleet.gatewayEnv,
    PAID_RATE_LIMIT_PER_ADDRESS: '1000',
    PAID_RATE_LIMIT_PER_PAYER: '1000',
    AUTH_FAILURE_LIMIT: '10',
    PAYER_FAILURE_LIMIT: '20',
  })
  const viaLockouts = (path: string, init: JsonRequestInit) => jsonRequest(`${lockouts.url}${path}`, init)
  const account = (i: number) => privateKeyToAccount(devnet.accounts[i]!.privateKey)
  const unknownKey = () => `atsk_${randomBytes(24).toString('base64url')}`

  t.test(
    '50 replays of one payment from one address count against its payer only: another payer and a key created then are served from that address',
    async (t) => {
      const replayer = account(4)
      const header = await pay({ payer: replayer })
      t.equal((await viaLockouts('/agent/skills', from('203.0.113.40', header))).status, 200, 'the payment is served once')
      const replays = []
      for (let i = 0; i < 50; i++) replays.push(await viaLockouts('/agent/skills', from('203.0.113.40', header)))
      t.same(
        replays.map((res) => res.status),
        [...Array(20).fill(402), ...Array(30).fill(429)],
        'PAYER_FAILURE_LIMIT (20) replays refused 402, then the payer gets 429',
      )
      t.match(replays[0]!.body.error, /^nonce already used/)
      t.match(replays[49]!.body, { error: new RegExp(`^too many refused payments from payer ${replayer.address}; retry in \\d+ s$`, 'i') })
      t.ok(Number(replays[49]!.headers.get('retry-after')) > 0, 'retry-after says when')

      const other = await viaLockouts('/agent/skills', from('203.0.113.40', await pay({ payer: account(5) })))
      t.equal(other.status, 200, 'another payer from the same address is served')
      const { key } = await fleet.createKey('readonly')
      const keyed = await viaLockouts('/market/prices', { key, ...from('203.0.113.40') })
      t.equal(keyed.status, 200, 'a key created now is served from the same address')
      const elsewhere = await viaLockouts('/agent/skills', from('203.0.113.41', await pay({ payer: replayer })))
      t.equal(elsewhere.status, 429, "the replayer's new payment is refused from any address until the window ends")
    },
  )

  t.test('a key created a moment ago is served from an address locked out for unknown keys; unknown keys stay refused', async (t) => {
    const statuses = []
    for (let i = 0; i < 10; i++) statuses.push((await viaLockouts('/market/prices', { key: unknownKey(), ...from('203.0.113.42') })).status)
    t.same(statuses, Array(10).fill(401), 'AUTH_FAILURE_LIMIT (10) unknown keys')
    const locked = await viaLockouts('/market/prices', { key: unknownKey(), ...from('203.0.113.42') })
    t.equal(locked.status, 429, 'then the address is refused for unknown keys')
    const { key } = await fleet.createKey('readonly')
    const fresh = await viaLockouts('/market/prices', { key, ...from('203.0.113.42') })
    t.equal(fresh.status, 200, 'the new key is known to this gateway already: served without a lookup')
    t.equal((await viaLockouts('/market/prices', { key: unknownKey(), ...from('203.0.113.42') })).status, 429, 'unknown keys still are not')
  })

  t.test('payments whose signature does not verify count against the client address: it is locked out', async (t) => {
    // the payment of account 5 claiming to come from account 6: the signature names another signer
    const forged = (header: string) => {
      const decoded = JSON.parse(Buffer.from(header, 'base64').toString())
      decoded.payload.authorization.from = account(6).address
      return Buffer.from(JSON.stringify(decoded)).toString('base64')
    }
    const refused = []
    for (let i = 0; i < 10; i++)
      refused.push(await viaLockouts('/agent/skills', from('203.0.113.43', forged(await pay({ payer: account(5) })))))
    t.same(
      refused.map((res) => res.status),
      Array(10).fill(402),
    )
    t.match(refused[0]!.body.error, /^invalid signature/)
    const locked = await viaLockouts('/agent/skills', from('203.0.113.43', await pay({ payer: account(5) })))
    t.equal(locked.status, 429, 'then every payment from the address is refused for the window')
    t.match(locked.body, { error: /^too many failed authentications from this address; retry in \d+ s$/ })
  })
})
