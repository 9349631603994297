// Paid routes through the gateway: the 402, a hand-signed payment, replays, two gateway processes.
import { spawn } from 'node:child_process'
import { freePort } from '@ats/service-kit/testing'
import { fileURLToPath } from 'node:url'
import { startTestDevnet } from '@ats/devnet'
import t, { type Test } from 'tap'
import { startPaidFleet } from '../fleet.ts'

t.test('paid routes: 402, a hand-signed payment, replays', async (t) => {
  // one devnet for the file: each test signs fresh nonces
  const chain = await startTestDevnet(t)
  const paid = (t: Test, options?: Parameters<typeof startPaidFleet>[1]) => startPaidFleet(t, { chain, ...options })
  const decode = (header: string | null) => JSON.parse(Buffer.from(header ?? '', 'base64').toString('utf8'))
  // one fleet for the tests with the default settings: each signs fresh nonces. The last one sends 49
  // refused payments from one address: above the default limit of failed checks (429 after 30)
  const shared = await paid(t, { gatewayEnv: { AUTH_FAILURE_LIMIT: '100' } })

  t.test('a paid route without a payment answers 402 with the requirements in the body and the v2 header', async (t) => {
    const { request, payTo, usdc } = shared
    const res = await request('/agent/skills')
    t.equal(res.status, 402)
    t.match(res.body, {
      x402Version: 1,
      error: /payment required/,
      accepts: [
        {
          scheme: 'exact',
          network: 'anvil',
          maxAmountRequired: '10000',
          payTo,
          asset: usdc,
          resource: /\/agent\/skills$/,
          description: String,
          mimeType: 'application/json',
          maxTimeoutSeconds: 600,
          extra: { name: 'USD Coin', version: '2' },
        },
      ],
    })
    t.match(decode(res.headers.get('payment-required')), {
      x402Version: 2,
      accepts: [{ network: 'eip155:31337', amount: '10000', payTo, asset: usdc }],
    })
  })

  t.test('a hand-signed X-PAYMENT passes once; the payer is the owner the service sees and the answer says it was charged', async (t) => {
    const { request, pay, payer } = shared
    const header = await pay()
    // a client's own x-ats-payment claim is replaced by the payment the gateway verified
    const forged = `${payer.address.toLowerCase()}:0x${'11'.repeat(32)}`
    const res = await request('/agent/skills', {
      headers: { 'x-payment': header, 'x-ats-payment': forged, 'x-ats-payment-valid-before': '99999999999' },
    })
    t.equal(res.status, 200)
    t.equal(res.body.headers['x-ats-owner-id'], payer.address)
    const { nonce, validBefore } = JSON.parse(Buffer.from(header, 'base64').toString('utf8')).payload.authorization
    t.equal(
      res.body.headers['x-ats-payment'],
      `${payer.address.toLowerCase()}:${nonce}`,
      'the verified payment goes to the service as <payer>:<nonce>',
    )
    t.equal(res.body.headers['x-ats-payment-valid-before'], validBefore, "with its validBefore, never the client's claim")
    t.notOk('x-payment' in res.body.headers, 'the payment header is not forwarded')
    const receipt = decode(res.headers.get('x-payment-response'))
    t.same(receipt, { success: true, transaction: '', network: 'anvil', payer: payer.address })
    t.equal(res.headers.get('payment-response'), res.headers.get('x-payment-response'))
    const replay = await request('/agent/skills', { headers: { 'x-payment': header } })
    t.equal(replay.status, 402)
    t.match(replay.body.error, /^nonce already used/)
  })

  t.test('each bad payment answers 402 saying what is wrong', async (t) => {
    const { request, pay, devnet } = shared
    const now = BigInt(Math.floor(Date.now() / 1000))
    const good = JSON.parse(Buffer.from(await pay(), 'base64').toString('utf8'))
    const tampered = structuredClone(good)
    tampered.payload.authorization.value = '20000'
    const cases: Array<[string, string, RegExp]> = [
      [
        'tampered signature',
        Buffer.from(JSON.stringify(tampered)).toString('base64'),
        /^invalid signature: signed by 0x[0-9a-fA-F]{40}, not by authorization.from/,
      ],
      ['wrong payTo', await pay({ to: devnet.accounts[3]!.address }), /^wrong recipient/],
      ['value 9999', await pay({ value: 9_999n }), /^amount too low: 9999 < 10000/],
      ['expired validBefore', await pay({ validAfter: now - 120n, validBefore: now - 60n }), /^expired: validBefore/],
      ['future validAfter', await pay({ validAfter: now + 3600n }), /^not yet valid: validAfter/],
      ['wrong network', await pay({ network: 'eip155:42161' }), /^wrong network: 'eip155:42161'/],
      ['garbage base64', '%%%not-base64%%%', /^X-PAYMENT: not base64/],
      ['base64 of no JSON', Buffer.from('hello').toString('base64'), /^X-PAYMENT: base64 does not decode to JSON/],
    ]
    for (const [what, header, error] of cases) {
      const res = await request('/agent/skills', { headers: { 'x-payment': header } })
      t.equal(res.status, 402, what)
      t.match(res.body, { x402Version: 1, error, accepts: Array }, what)
      t.match(decode(res.headers.get('payment-required')), { x402Version: 2, error }, `${what}: the v2 header says it too`)
    }
  })

  t.test('a payment is not charged when the service answers 4xx, and the answer says so', async (t) => {
    const { request, pay } = shared
    const res = await request('/agent/missing', { headers: { 'x-payment': await pay() } })
    t.equal(res.status, 404)
    t.match(decode(res.headers.get('x-payment-response')), { success: false, errorReason: /^not charged: the service answered 404/ })
  })

  t.test("SKIP_PAYMENT lets paid routes through unpaid: the owner is the header's from, else a development address", async (t) => {
    const { request, pay, payer } = await paid(t, { gatewayEnv: { SKIP_PAYMENT: 'true' } })
    const res = await request('/agent/skills')
    t.equal(res.status, 200)
    t.equal(res.body.headers['x-ats-owner-id'], '0x000000000000000000000000000000000000dEaD')
    const named = await request('/agent/skills', { headers: { 'x-payment': await pay({ value: 1n }) } })
    t.equal(named.status, 200, 'even a payment that would be refused passes')
    t.equal(named.body.headers['x-ats-owner-id'], payer.address)
    t.equal(named.headers.get('x-payment-response'), null, 'and nothing is charged')
  })

  /** A gateway in a process of its own, as deployed. */
  async function gatewayProcess(t: Test, env: NodeJS.ProcessEnv) {
    const port = await freePort()
    // the source with tsx; under pnpm test (node's ats-dist condition) the compiled server, with plain node
    const entry = fileURLToPath(import.meta.resolve('@ats/gateway/server'))
    const child = spawn(process.execPath, entry.endsWith('.ts') ? ['--import', 'tsx', entry] : [entry], {
      env: { ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1' },
      stdio: ['ignore', 'ignore', 'inherit'],
    })
    t.teardown(() => {
      child.kill('SIGTERM')
      return new Promise((resolve) => (child.exitCode === null ? child.once('exit', resolve) : resolve(null)))
    })
    const url = `http://127.0.0.1:${port}`
    for (let i = 0; i < 600; i++) {
      if (child.exitCode !== null) throw new Error(`gateway process exited with ${child.exitCode}`)
      if (
        await fetch(`${url}/health`).then(
          (r) => r.ok,
          () => false,
        )
      )
        return url
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    throw new Error('gateway process never became ready')
  }

  t.test('one payment sent 50 times at once to two gateway processes succeeds exactly once', async (t) => {
    // 49 refused payments from one address: above the default limit of failed checks (AUTH_FAILURE_LIMIT above)
    const { gatewayEnv, pay } = shared
    const urls = await Promise.all([gatewayProcess(t, gatewayEnv), gatewayProcess(t, gatewayEnv)])
    const header = await pay()
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        fetch(`${urls[i % 2]}/agent/skills`, { headers: { 'x-payment': header } }).then(async (r) => ({
          status: r.status,
          body: await r.json(),
        })),
      ),
    )
    t.equal(answers.filter((a) => a.status === 200).length, 1, 'exactly one success')
    const refused = answers.filter((a) => a.status !== 200)
    t.equal(refused.length, 49)
    t.ok(
      refused.every((a) => a.status === 402 && /^nonce already used/.test(a.body.error)),
      'the other 49 are refused as replays',
    )
  })
})
