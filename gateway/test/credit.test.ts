// Prepaid credit at the edge: the Redis copy and its debits (two clients, as two gateways), the
// sign-in check, then two whole gateways in process on the devnet before an echo upstream, with a
// stand-in for the ledger's snapshot on NATS: x402's own clients sign in and top up unmodified.
import { natsChannels, type CreditDebit, type CreditUsage } from '@ats/contracts'
import { startTestDevnet } from '@ats/devnet'
import { addNatsService, createService, ensureStream, serveEndpoint } from '@ats/service-kit'
import { baseTestEnv, eventually, freePorts, freshNamespace, recordingFetch, testInfra } from '@ats/service-kit/testing'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { formatSIWEMessage, SIGN_IN_WITH_X, wrapFetchWithSIWx, type SIWxPayload } from '@x402/extensions/sign-in-with-x'
import { wrapFetchWithPayment, x402Client } from '@x402/fetch'
import Fastify from 'fastify'
import { connect } from 'nats'
import { pino } from 'pino'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { createCreditPublisher } from '../src/credit/creditPublisher.ts'
import { createCreditStore, type CreditSnapshot } from '../src/credit/creditStore.ts'
import { createSignIn, siweMessage } from '../src/credit/signIn.ts'
import { gatewayService } from '../src/service.ts'
import { redisPair } from './paymentFixtures.ts'

const { redisUrl } = await testInfra()
// started first: the root test must not end (and stop it) while it starts
const { devnet, chainEnv } = await startTestDevnet(t)
const [redisA, redisB] = redisPair(t, redisUrl)
const wallet = () => privateKeyToAccount(generatePrivateKey()).address

// two whole gateways before an echo upstream (the agent and admin routes), on the devnet
const probe = Fastify()
const probed: Array<{ url: string; headers: Record<string, unknown> }> = []
probe.all('/*', async (request, reply) => {
  probed.push({ url: request.url, headers: request.headers })
  const status = Number((request.query as { status?: string }).status ?? (request.method === 'POST' ? 202 : 200))
  return reply.code(status).send({ path: request.url, headers: request.headers })
})
t.teardown(() => probe.close())
const probeUrl = await probe.listen({ port: 0, host: '127.0.0.1' })
const [port] = await freePorts(1)
const publicUrl = `http://127.0.0.1:${port}`
const price = 10_000n
const env: NodeJS.ProcessEnv = {
  ...(await baseTestEnv(t)),
  ...chainEnv,
  REDIS_URL: redisUrl,
  PAY_TO: devnet.accounts[9]!.address,
  AGENT_URL: probeUrl,
  ADMIN_URL: probeUrl,
  PUBLIC_URL: publicUrl,
  PAYMENT_PRICE: price.toString(),
  CREDIT_METERED_HOLD: '50000',
}
const channels = natsChannels(env.NATS_NAMESPACE!)
const nc = await connect({ servers: env.NATS_URL! })
t.teardown(() => nc.close())

// the ledger's snapshot, as admin answers it
const ledger = new Map<string, CreditSnapshot>()
const ledgerService = await addNatsService(nc, 'admin', '0.0.1', 'the credit snapshot of the test')
serveEndpoint(ledgerService, channels.admin.creditSnapshot, pino({ level: 'silent' }), async ({ wallet }) => {
  const { available, entry } = ledger.get(wallet.toLowerCase()) ?? { available: 0n, entry: 0n }
  return { wallet, available: available.toString(), entry: entry.toString() }
})
// every debit and usage report the gateways publish
const debits: CreditDebit[] = []
const usages: CreditUsage[] = []
const credit = channels.admin.credit
void (async () => {
  for await (const m of nc.subscribe(credit.debited.subject)) debits.push(...credit.debited.message.decode(m.data).debits)
})()
void (async () => {
  for await (const m of nc.subscribe(credit.usage.subject)) usages.push(credit.usage.message.decode(m.data))
})()
await nc.flush()

const gateways = [await createService(gatewayService, { ...env, PORT: String(port) }), await createService(gatewayService, env)]
t.teardown(() => Promise.all(gateways.map((g) => g.close())))
await gateways[0]!.listen()
const store = createCreditStore({
  redis: redisA,
  namespace: env.NATS_NAMESPACE!,
  idTtlMs: 60_000,
  adjustmentTtlMs: 60_000,
  snapshot: async () => ({ available: 0n, entry: 0n }),
})
/** a wallet the ledger says holds `available` */
const funded = (available: bigint) => {
  const account = privateKeyToAccount(generatePrivateKey())
  ledger.set(account.address.toLowerCase(), { available, entry: 0n })
  return account
}
/** a session token of a wallet the ledger says holds `available` */
const sessionOf = async (available: bigint) => {
  const payer = funded(available)
  const opened = await wrapFetchWithSIWx(fetch, payer)(`${publicUrl}/credit/session`, { method: 'POST' })
  return { payer, headers: { authorization: `Bearer ${((await opened.json()) as { token: string }).token}` } }
}

const decode = (header: unknown) => JSON.parse(Buffer.from(String(header), 'base64').toString('utf8'))
/** the debit published under `id`: the gateways publish on connections of their own, so it may arrive a moment after the answer */
const debitOf = (id: string) => eventually(`the debit ${id}`, async () => debits.find((d) => d.id === id))
const usageOf = (hold: string) => eventually(`the usage of ${hold}`, async () => usages.find((u) => u.hold === hold))

t.test('the 402s of paid routes carry the sign-in-with-x challenge for our origin and chain', async (t) => {
  const res = await gateways[1]!.app.inject({ method: 'GET', url: '/agent/skills' })
  t.equal(res.statusCode, 402)
  const { extensions } = decode(res.headers['payment-required'])
  t.match(extensions[SIGN_IN_WITH_X], {
    info: { domain: `127.0.0.1:${port}`, uri: `${publicUrl}/agent/skills`, version: '1', nonce: /^[0-9a-f]{56}$/, issuedAt: String },
    supportedChains: [{ chainId: `eip155:${devnet.chainId}`, type: 'eip191' }],
  })
})

t.test('wrapFetchWithSIWx pays 20 requests from credit: the credit falls by 20 prices, no payment is signed', async (t) => {
  const payer = funded(25n * price)
  const { fetch: recording, sent } = recordingFetch()
  const signedIn = wrapFetchWithSIWx(recording, payer)
  const before = probed.length
  for (let i = 0; i < 20; i++) {
    const res = await signedIn(`${publicUrl}/agent/skills?i=${i}`)
    t.equal(res.status, 200, `request ${i}`)
    if (i === 0) t.match(res.headers.get('ats-session-token'), /^atcs_/, 'a signed-in answer carries a session token')
    await res.body?.cancel()
  }
  t.equal(await store.available(payer.address), 5n * price, '25 prices − 20')
  t.notOk(
    sent.some((h) => h.has('payment-signature') || h.has('x-payment')),
    'no payment authorization was ever sent',
  )
  const seen = probed.slice(before)
  t.equal(seen.length, 20)
  t.ok(
    seen.every((s) => s.headers['x-ats-credit-wallet'] === payer.address.toLowerCase() && !(SIGN_IN_WITH_X in s.headers)),
    'the service is told the wallet, never sent the sign-in',
  )
  const mine = await eventually('the 20 debits', async () => {
    const found = debits.filter((d) => d.wallet === payer.address.toLowerCase())
    return found.length >= 20 ? found : undefined
  })
  t.equal(mine.length, 20, 'every debit told to the ledger')
  t.ok(
    mine.every((d) => d.kind === 'debit' && d.amount === price.toString() && d.route === 'GET /agent/skills'),
    "each a debit of the route's price",
  )
})

t.test('a session token pays as Authorization: Bearer; POST /credit/session returns one; an unknown one is 401', async (t) => {
  const payer = funded(10n * price)
  const signedIn = wrapFetchWithSIWx(fetch, payer)
  const opened = await signedIn(`${publicUrl}/credit/session`, { method: 'POST' })
  t.equal(opened.status, 200)
  const session = (await opened.json()) as { token: string; wallet: string; expiresAt: string }
  t.match(session, { token: /^atcs_[A-Za-z0-9_-]{32}$/, wallet: payer.address.toLowerCase() })
  t.ok(Date.parse(session.expiresAt) > Date.now() + 14 * 60_000, 'about 15 minutes')
  for (const gateway of gateways) {
    const res = await gateway.app.inject({ method: 'GET', url: '/agent/skills', headers: { authorization: `Bearer ${session.token}` } })
    t.equal(res.statusCode, 200, 'on either gateway')
    t.notOk(res.json().headers.authorization, 'the token stays at the gateway')
  }
  t.equal(await store.available(payer.address), 8n * price)
  const unknown = await gateways[1]!.app.inject({
    method: 'GET',
    url: '/agent/skills',
    headers: { authorization: `Bearer atcs_${'x'.repeat(32)}` },
  })
  t.equal(unknown.statusCode, 401)
  t.same(unknown.json(), { error: 'unknown or expired session token: sign in again (POST /credit/session with SIGN-IN-WITH-X)' })
  t.equal(
    (await gateways[1]!.app.inject({ method: 'GET', url: '/agent/skills', headers: { 'sign-in-with-x': 'bm90IGEgc2lnbi1pbg==' } }))
      .statusCode,
    401,
    'a malformed sign-in is 401 too',
  )
})

t.test('50 requests at once over two gateways against 10 prices of credit: 10 served, 40 answered 402 with a top-up', async (t) => {
  const payer = funded(10n * price)
  const { token } = (await (await wrapFetchWithSIWx(fetch, payer)(`${publicUrl}/credit/session`, { method: 'POST' })).json()) as {
    token: string
  }
  const answers = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      gateways[i % 2]!.app.inject({ method: 'GET', url: `/agent/skills?burst=${i}`, headers: { authorization: `Bearer ${token}` } }),
    ),
  )
  t.equal(answers.filter((a) => a.statusCode === 200).length, 10)
  const refused = answers.filter((a) => a.statusCode === 402)
  t.equal(refused.length, 40)
  t.match(refused[0]!.json(), {
    x402Version: 1,
    error: /^insufficient credit: 0x[0-9a-fA-F]{40} has 0 available, this request costs 10000/,
    accepts: [{ scheme: 'exact', maxAmountRequired: price.toString() }],
    topUp: { url: `${publicUrl}/credit/topup?amount=1000000`, minimum: '1000000', available: '0', price: price.toString() },
  })
  t.ok(decode(refused[0]!.headers['payment-required']).extensions[SIGN_IN_WITH_X], 'and the x402 requirements, to pay this one instead')
  t.equal(await store.available(payer.address), 0n)
})

t.test('credit keys lost in Redis are rebuilt from the ledger snapshot: nothing lost, nothing twice', async (t) => {
  const payer = funded(10n * price)
  const headers = {
    authorization: `Bearer ${(await (await wrapFetchWithSIWx(fetch, payer)(`${publicUrl}/credit/session`, { method: 'POST' })).json()).token}`,
  }
  t.equal((await gateways[0]!.app.inject({ method: 'GET', url: '/agent/skills', headers })).statusCode, 200)
  // what admin's ledger holds once it recorded that debit; Redis then loses the copy
  ledger.set(payer.address.toLowerCase(), { available: 9n * price, entry: 0n })
  await redisA.del(...store.keysOf(payer.address))
  t.equal((await gateways[1]!.app.inject({ method: 'GET', url: '/agent/skills', headers })).statusCode, 200)
  t.equal(await store.available(payer.address), 8n * price)
})

t.test('an answer of 400 or more keeps nothing: the credit comes back and the ledger never hears of it', async (t) => {
  const { payer, headers } = await sessionOf(2n * price)
  const failed = await gateways[0]!.app.inject({ method: 'GET', url: '/agent/skills?status=500', headers })
  t.equal(failed.statusCode, 500)
  t.equal(await store.available(payer.address), 2n * price, 'given back')
  const served = await gateways[1]!.app.inject({ method: 'GET', url: '/agent/skills', headers })
  t.equal(served.statusCode, 200)
  t.equal(served.headers['ats-credit-available'], price.toString(), 'the answer says what is left')
  await debitOf(served.headers['x-request-id'] as string)
  await nc.flush()
  t.same(
    debits.filter((d) => d.wallet === payer.address.toLowerCase()).map((d) => d.id),
    [served.headers['x-request-id']],
    'only the request served is debited',
  )
})

t.test('POST /agent/prompt paid by credit holds CREDIT_METERED_HOLD, names the hold to the agent and reports nothing itself', async (t) => {
  const payer = funded(10n * 50_000n)
  const session = await (await wrapFetchWithSIWx(fetch, payer)(`${publicUrl}/credit/session`, { method: 'POST' })).json()
  const res = await gateways[1]!.app.inject({
    method: 'POST',
    url: '/agent/prompt',
    headers: { authorization: `Bearer ${session.token}`, 'content-type': 'application/json', 'x-ats-credit-hold': 'forged' },
    payload: { prompt: 'hi' },
  })
  t.equal(res.statusCode, 202)
  const seen = res.json().headers
  const hold = seen['x-ats-credit-hold']
  t.not(hold, 'forged', "a client's own credit headers are dropped")
  t.match(seen, { 'x-ats-credit-wallet': payer.address.toLowerCase(), 'x-ats-credit-hold-amount': '50000' })
  t.match(await debitOf(hold), { kind: 'hold', amount: '50000', route: 'POST /agent/prompt' })
  await nc.flush()
  t.notOk(
    usages.some((u) => u.hold === hold),
    'the agent reports what the job used',
  )
})

t.test('a metered request the gateway answers itself (never forwarded) reports its hold unused', async (t) => {
  // a gateway whose wallets may send one paid request a window: the second is refused after its hold
  const limited = await createService(gatewayService, { ...env, PAID_RATE_LIMIT_PER_PAYER: '1' })
  t.teardown(() => limited.close())
  const { headers } = await sessionOf(200_000n)
  const prompt = () =>
    limited.app.inject({
      method: 'POST',
      url: '/agent/prompt',
      headers: { ...headers, 'content-type': 'application/json' },
      payload: { prompt: 'hi' },
    })
  t.equal((await prompt()).statusCode, 202)
  const refused = await prompt()
  t.equal(refused.statusCode, 429)
  const hold = refused.headers['x-request-id'] as string
  t.match(await debitOf(hold), { kind: 'hold', amount: '50000' }, 'the hold was taken before the limit')
  t.match(await usageOf(hold), { amount: '0', outcome: 'failed', reason: 'answered 429 by the gateway' }, 'and reported unused')
})

t.test('refused sign-ins and session tokens count as failed authentications of the client address', async (t) => {
  const strict = await createService(gatewayService, { ...env, AUTH_FAILURE_LIMIT: '2' })
  t.teardown(() => strict.close())
  const bad = { authorization: `Bearer atcs_${'y'.repeat(32)}` }
  const statuses = []
  for (const url of ['/agent/skills', '/v1/chat/completions', '/credit', '/agent/skills']) {
    const res = await strict.app.inject({
      method: url.startsWith('/v1') ? 'POST' : 'GET',
      url,
      headers: bad,
      payload: url.startsWith('/v1') ? {} : undefined,
      // an address of its own: the other tests' refusals are counted for theirs
      remoteAddress: '10.11.12.13',
    })
    statuses.push(res.statusCode)
  }
  t.same(statuses, [401, 401, 429, 429], 'after AUTH_FAILURE_LIMIT refusals, 429 on every route credit can pay')
})

t.test('the top-up route: its price is the amount asked; out of range is 400; @x402/fetch pays it', async (t) => {
  const low = await gateways[0]!.app.inject({ method: 'POST', url: '/credit/topup?amount=999999' })
  t.equal(low.statusCode, 400)
  t.match(low.json(), { error: /^amount 999999 is outside the top-up range: from 1000000 \(CREDIT_MIN_TOPUP\)/ })
  t.equal((await gateways[0]!.app.inject({ method: 'POST', url: '/credit/topup?amount=abc' })).statusCode, 400)

  const asked = await gateways[0]!.app.inject({ method: 'POST', url: '/credit/topup?amount=2500000' })
  t.equal(asked.statusCode, 402)
  t.match(decode(asked.headers['payment-required']).accepts, [{ amount: '2500000' }])

  const payer = privateKeyToAccount(devnet.accounts[3]!.privateKey)
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
  const network = `eip155:${devnet.chainId}` as const
  const client = x402Client.fromConfig({
    schemes: [{ network, client: new ExactEvmScheme(payer) }],
    spendControls: { allowedAssets: [{ network, asset: usdc, maxAmountPerPayment: '5000000' }] },
  })
  const before = probed.length
  const paid = await wrapFetchWithPayment(fetch, client)(`${publicUrl}/credit/topup?amount=2500000`, { method: 'POST' })
  t.equal(paid.status, 202)
  t.match(decode(paid.headers.get('payment-response')), { success: true, payer: payer.address })
  t.match(probed[before], { url: '/credit/topup?amount=2500000', headers: { 'x-ats-owner-id': payer.address } }, 'on to admin')

  const signedIn = await wrapFetchWithSIWx(fetch, funded(10n * price))(`${publicUrl}/credit/topup?amount=1000000`, { method: 'POST' })
  t.equal(signedIn.status, 402, 'credit does not buy credit')
})

t.test("a /v1 completion paid by a session token holds CREDIT_METERED_HOLD; short credit is a 402 in OpenAI's shape", async (t) => {
  const { payer, headers } = await sessionOf(60_000n)
  const chat = (via: number) =>
    gateways[via]!.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { ...headers, 'content-type': 'application/json' },
      payload: { model: 'x', messages: [] },
    })
  const res = await chat(0)
  t.equal(res.statusCode, 202)
  const seen = res.json().headers
  t.match(seen, {
    'x-ats-credit-wallet': payer.address.toLowerCase(),
    'x-ats-credit-hold-amount': '50000',
    'x-ats-owner-id': payer.address,
  })
  t.notOk(seen.authorization, 'the token stays at the gateway')
  t.match(await debitOf(seen['x-ats-credit-hold']), { kind: 'hold', amount: '50000', route: 'POST /v1/chat/completions' })
  const short = await chat(1)
  t.equal(short.statusCode, 402)
  t.match(short.json(), { error: { message: /^insufficient credit: 0x[0-9a-fA-F]{40} has 10000 available, this request holds 50000/ } })
  const anthropic = await gateways[1]!.app.inject({
    method: 'POST',
    url: '/v1/messages',
    headers: { 'x-api-key': headers.authorization.slice('Bearer '.length), 'content-type': 'application/json' },
    payload: {},
  })
  t.equal(anthropic.statusCode, 402, "Anthropic's SDKs send the token in x-api-key: read there too")
})

t.test('GET /credit with a session names the wallet to admin; POST /credit/withdraw takes it from the credit once per key', async (t) => {
  const { payer, headers } = await sessionOf(7n * price)
  const read = await gateways[0]!.app.inject({ method: 'GET', url: '/credit', headers })
  t.equal(read.statusCode, 200)
  t.equal(read.json().headers['x-ats-credit-wallet'], payer.address.toLowerCase())
  await nc.flush()
  t.notOk(
    debits.some((d) => d.wallet === payer.address.toLowerCase()),
    'reading takes nothing',
  )

  const some = { ...headers, 'content-type': 'application/json', 'idempotency-key': 'withdraw-some-1' }
  const first = await gateways[0]!.app.inject({ method: 'POST', url: '/credit/withdraw', headers: some, payload: { amount: '20000' } })
  t.equal(first.statusCode, 202)
  t.match(first.json().headers, { 'x-ats-credit-wallet': payer.address.toLowerCase(), 'idempotency-key': 'withdraw-some-1' })
  const again = await gateways[1]!.app.inject({ method: 'POST', url: '/credit/withdraw', headers: some, payload: { amount: '20000' } })
  t.equal(again.statusCode, 202, 'a repeat goes on to admin, which answers the first result')
  t.equal(await store.available(payer.address), 5n * price, 'taken once')
  await debitOf('withdraw-some-1')
  await nc.flush()
  t.match(
    debits.filter((d) => d.id === 'withdraw-some-1'),
    [{ kind: 'withdraw', amount: '20000', wallet: payer.address.toLowerCase(), route: 'POST /credit/withdraw' }],
  )

  const all = await gateways[1]!.app.inject({ method: 'POST', url: '/credit/withdraw', headers })
  t.equal(all.statusCode, 202)
  const key = all.headers['idempotency-key'] as string
  t.match(key, /^gen_/, 'a key is made and answered when none is sent')
  t.match(await debitOf(key), { kind: 'withdraw', amount: (5n * price).toString() }, 'no amount: all that is available')
  const none = await gateways[0]!.app.inject({ method: 'POST', url: '/credit/withdraw', headers })
  t.equal(none.statusCode, 402)
  t.match(none.json(), { error: /^insufficient credit: .* has 0 available, this withdrawal is at least 1/ })
  const bad = await gateways[0]!.app.inject({
    method: 'POST',
    url: '/credit/withdraw',
    headers: { ...headers, 'content-type': 'application/json' },
    payload: { amount: 5 },
  })
  t.equal(bad.statusCode, 400)
})

t.test('a debit the ledger cannot be told of is given back and the answer is 503, not served uncharged', async (t) => {
  const { payer, headers } = await sessionOf(100_000n)
  const jsm = await nc.jetstreamManager()
  await jsm.streams.delete(credit.stream)
  t.teardown(() => ensureStream(nc, credit.streamSpec))
  const res = await gateways[0]!.app.inject({ method: 'GET', url: '/agent/skills', headers })
  t.equal(res.statusCode, 503)
  t.same(res.json(), { error: 'the credit debit could not be recorded, so this answer is not given (not charged); try again shortly' })
  t.equal(await store.available(payer.address), 100_000n, 'the credit is whole')
  const metered = await gateways[1]!.app.inject({
    method: 'POST',
    url: '/agent/prompt',
    headers: { ...headers, 'content-type': 'application/json' },
    payload: { prompt: 'hi' },
  })
  t.equal(metered.statusCode, 503, 'a hold the ledger cannot be told of is not taken: the request is not proxied')
  t.match(metered.json(), { error: /^the credit debit could not be recorded/ })
  t.equal(await store.available(payer.address), 100_000n)
})

t.test('the Redis copy of credit', async (t) => {
  const namespace = await freshNamespace(t)
  const ledger = new Map<string, CreditSnapshot>()
  let snapshots = 0
  const storeOn = (redis: typeof redisA) =>
    createCreditStore({
      redis,
      namespace,
      idTtlMs: 60_000,
      adjustmentTtlMs: 60_000,
      snapshot: async (w) => {
        snapshots++
        return ledger.get(w.toLowerCase()) ?? { available: 0n, entry: 0n }
      },
    })
  const [a, b] = [storeOn(redisA), storeOn(redisB)]

  t.test('a debit is taken once per id: the same id again is a repeat, not a second debit', async (t) => {
    const w = wallet()
    ledger.set(w.toLowerCase(), { available: 50n, entry: 0n })
    t.same(await a.debit(w, 'req-1', 10n), { kind: 'debited', available: 40n, amount: 10n })
    t.same(await b.debit(w, 'req-1', 10n), { kind: 'replayed', amount: 10n }, 'on another gateway too')
    t.equal(await a.available(w), 40n)
    t.same(await b.debit(w, 'req-2', 41n), { kind: 'short', available: 40n }, 'never below zero')
  })

  t.test('large amounts stay exact (Lua numbers are doubles)', async (t) => {
    const w = wallet()
    ledger.set(w.toLowerCase(), { available: 1_000_000_000_000_000n, entry: 0n })
    t.same(await a.debit(w, 'big-1', 675_999n), { kind: 'debited', available: 999_999_999_324_001n, amount: 675_999n })
    t.same(await a.debit(w, 'big-2', 'all'), { kind: 'debited', available: 0n, amount: 999_999_999_324_001n })
  })

  t.test('50 debits at once from two gateways against 10 prices: exactly 10 taken', async (t) => {
    const w = wallet()
    ledger.set(w.toLowerCase(), { available: 100n, entry: 0n })
    const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).debit(w, `burst-${i}`, 10n)))
    t.equal(outcomes.filter((o) => o.kind === 'debited').length, 10)
    t.equal(outcomes.filter((o) => o.kind === 'short').length, 40)
    t.equal(await a.available(w), 0n)
  })

  t.test('a lost copy is rebuilt from the snapshot once; adjustments are added once each, in any order', async (t) => {
    const w = wallet()
    ledger.set(w.toLowerCase(), { available: 100n, entry: 5n })
    const before = snapshots
    await Promise.all([a.debit(w, 'r-1', 10n), b.debit(w, 'r-2', 10n)])
    t.equal(await a.available(w), 80n)
    t.ok(snapshots - before >= 1, 'read from the ledger')
    t.equal(await a.apply({ wallet: w, entry: '5', delta: '30' }), 'included', 'the snapshot held entry 5 already')
    t.equal(await a.apply({ wallet: w, entry: '7', delta: '30' }), 'added')
    t.equal(await b.apply({ wallet: w, entry: '6', delta: '5' }), 'added', 'an older entry arriving later still counts')
    t.equal(await b.apply({ wallet: w, entry: '7', delta: '30' }), 'applied', 'a redelivery does not')
    t.equal(await a.available(w), 115n)

    // Redis loses the copy: adjustments arriving meanwhile wait; the rebuild adds those the snapshot lacks
    await redisA.del(a.keysOf(w)[0]!)
    ledger.set(w.toLowerCase(), { available: 115n, entry: 7n })
    t.equal(await a.apply({ wallet: w, entry: '8', delta: '20' }), 'pending')
    t.same(await b.debit(w, 'r-3', 15n), { kind: 'debited', available: 120n, amount: 15n }, '115 from the ledger + 20 pending − 15')
  })

  t.test('a debit given back returns once, and only to the copy it was taken from', async (t) => {
    const w = wallet()
    ledger.set(w.toLowerCase(), { available: 30n, entry: 0n })
    await a.debit(w, 'g-1', 10n)
    await a.giveBack(w, 'g-1')
    await b.giveBack(w, 'g-1')
    t.equal(await a.available(w), 30n)
    await a.debit(w, 'g-2', 10n)
    await redisA.del(a.keysOf(w)[0]!)
    await a.debit(w, 'g-3', 10n)
    await a.giveBack(w, 'g-2')
    t.equal(await a.available(w), 20n, 'the rebuilt copy never had g-2 taken: nothing added')
  })
})

t.test('debits published at once go in few stream messages, every one once', async (t) => {
  const channels = natsChannels(await freshNamespace(t)).admin.credit
  const publisher = await createCreditPublisher(nc, channels, pino({ level: 'silent' }))
  t.teardown(() => publisher.close())
  const w = wallet().toLowerCase()
  const ids = Array.from({ length: 50 }, (_, i) => `req-${i}`)
  await Promise.all(
    ids.map((id) => publisher.debit({ id, wallet: w, kind: 'debit', amount: '10', route: 'GET /agent/skills', at: Date.now() })),
  )
  const jsm = await nc.jetstreamManager()
  const { messages } = (await jsm.streams.info(channels.stream)).state
  t.ok(messages < 50, `50 debits in ${messages} messages`)
  const recorded: string[] = []
  for (let seq = 1; seq <= messages; seq++) {
    const { data } = await jsm.streams.getMessage(channels.stream, { seq })
    recorded.push(...channels.debited.message.decode(data).debits.map((d) => d.id))
  }
  t.same(recorded.sort(), [...ids].sort(), 'every debit is in the stream, once')
})

t.test('a quiet publisher sends a debit at once; a busy one at most one message per spacing, each debit once', async (t) => {
  const channels = natsChannels(await freshNamespace(t)).admin.credit
  const spacingMs = 25
  const publisher = await createCreditPublisher(nc, channels, pino({ level: 'silent' }), { spacingMs: 1_000 })
  const busy = await createCreditPublisher(nc, channels, pino({ level: 'silent' }), { spacingMs })
  t.teardown(async () => {
    await publisher.close()
    await busy.close()
  })
  const w = wallet().toLowerCase()
  const debit = (id: string): CreditDebit => ({ id, wallet: w, kind: 'debit', amount: '10', route: 'GET /agent/skills', at: Date.now() })
  const started = performance.now()
  await publisher.debit(debit('lone'))
  t.ok(performance.now() - started < 500, 'the first debit does not wait for the spacing (1 s)')

  const jsm = await nc.jetstreamManager()
  const before = (await jsm.streams.info(channels.stream)).state.messages
  const sent: Promise<void>[] = []
  const from = performance.now()
  for (let i = 0; i < 100; i++) {
    sent.push(busy.debit(debit(`busy-${i}`)))
    await new Promise((resolve) => setTimeout(resolve, 1))
  }
  await Promise.all(sent)
  const elapsed = performance.now() - from
  const messages = (await jsm.streams.info(channels.stream)).state.messages - before
  t.ok(messages <= Math.ceil(elapsed / spacingMs) + 1, `100 debits over ${elapsed.toFixed(0)} ms in ${messages} messages`)
  const recorded: string[] = []
  for (let seq = before + 1; seq <= before + messages; seq++) {
    const { data } = await jsm.streams.getMessage(channels.stream, { seq })
    recorded.push(...channels.debited.message.decode(data).debits.map((d) => d.id))
  }
  t.same(recorded.sort(), Array.from({ length: 100 }, (_, i) => `busy-${i}`).sort(), 'every debit is in the stream, once')
})

t.test('sign-in with a wallet', async (t) => {
  const namespace = await freshNamespace(t)
  const signIn = createSignIn({ redis: redisA, namespace, chainId: 31337, secret: 'a-secret-of-the-test', challengeTtlSeconds: 300 })
  const other = createSignIn({ redis: redisA, namespace, chainId: 31337, secret: 'another-secret', challengeTtlSeconds: 300 })
  const origin = 'http://127.0.0.1:3000'
  const account = privateKeyToAccount(generatePrivateKey())
  const { createSIWxPayload, encodeSIWxHeader } = await import('@x402/extensions/sign-in-with-x')
  const headerFor = async (from = signIn, url = `${origin}/agent/skills`) => {
    const { info, supportedChains } = from.extension(origin, '/agent/skills')[SIGN_IN_WITH_X]
    return encodeSIWxHeader(await createSIWxPayload({ ...info, ...supportedChains[0]! }, account, url))
  }

  t.test('the message checked is the one @x402/extensions signs', async (t) => {
    const { info } = signIn.extension(origin, '/agent/skills')[SIGN_IN_WITH_X]
    const payload = {
      ...info,
      chainId: 'eip155:31337',
      type: 'eip191',
      address: account.address.toLowerCase(),
      signature: '0x',
    } as SIWxPayload
    t.equal(siweMessage(payload, 31337), formatSIWEMessage(payload, payload.address))
    const bare = { ...payload, statement: undefined, resources: undefined, expirationTime: undefined }
    t.equal(siweMessage(bare, 31337), formatSIWEMessage(bare, bare.address), 'without the optional fields too')
  })

  t.test("a signed challenge names the wallet once; a replay, another service's challenge or another origin is refused", async (t) => {
    const header = await headerFor()
    t.equal(await signIn.verify(header, origin), account.address)
    await t.rejects(signIn.verify(header, origin), { statusCode: 401, message: /already used/ })
    await t.rejects(signIn.verify(await headerFor(other), origin), { message: /not issued by this service/ })
    await t.rejects(signIn.verify(await headerFor(), 'http://localhost:3000'), { message: /Domain mismatch/ })
    const forged = JSON.parse(Buffer.from(await headerFor(), 'base64').toString())
    forged.address = privateKeyToAccount(generatePrivateKey()).address
    await t.rejects(signIn.verify(Buffer.from(JSON.stringify(forged)).toString('base64'), origin), { message: /signature is not/ })
  })
})
