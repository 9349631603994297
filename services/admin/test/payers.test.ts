import { blockedPayerCodec, hashApiKey, natsChannels } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import { baseTestEnv, startService } from '@ats/service-kit/testing'
import { connect } from 'nats'
import t from 'tap'
import { adminService } from '../src/service.ts'
import { freshAddress, internalCall, startAdmin } from './helpers.ts'

// Payers as admin keeps them: the blocked payers the gateways watch, and the agent allowlist
// (with keys bound to a wallet). One file: each test file costs seconds of CPU to start.

const encoder = new TextEncoder()
const entry = (since: number) => ({ reason: 'insufficient funds: holds 0, the payment is 10000', since })

t.test('every blocked payer is listed, oldest first', async (t) => {
  const admin = await startAdmin(t)
  const [a, b, c] = [freshAddress(), freshAddress(), freshAddress()].map((address) => address.toLowerCase())
  await admin.blockedPayers.put(a!, blockedPayerCodec.encode(entry(3_000)))
  await admin.blockedPayers.put(b!, blockedPayerCodec.encode(entry(1_000)))
  await admin.blockedPayers.put(c!, blockedPayerCodec.encode(entry(2_000)))

  const res = await admin.call('GET', '/admin/payers/blocked')
  t.equal(res.status, 200)
  t.same(res.body, {
    payers: [
      { payer: b, ...entry(1_000) },
      { payer: c, ...entry(2_000) },
      { payer: a, ...entry(3_000) },
    ],
  })
})

t.test('a malformed blocked-payer entry is skipped, not a 500', async (t) => {
  const admin = await startAdmin(t)
  const [notJson, wrongShape, valid] = [freshAddress(), freshAddress(), freshAddress()].map((address) => address.toLowerCase())
  await admin.blockedPayers.put(notJson!, encoder.encode('not json'))
  await admin.blockedPayers.put(wrongShape!, encoder.encode('{"reason":"no since"}'))
  await admin.blockedPayers.put(valid!, blockedPayerCodec.encode(entry(1_700_000_000_000)))

  const res = await admin.call('GET', '/admin/payers/blocked')
  t.equal(res.status, 200)
  t.same(res.body, { payers: [{ payer: valid, ...entry(1_700_000_000_000) }] }, 'only the readable entry is listed')
})

t.test('unblocking takes the payer off the bucket; an unknown payer is 404, a malformed address 400', async (t) => {
  const admin = await startAdmin(t)
  const payer = freshAddress()
  await admin.blockedPayers.put(payer.toLowerCase(), blockedPayerCodec.encode(entry(1_000)))

  const unblocked = await admin.call('DELETE', `/admin/payers/blocked/${payer}`)
  t.equal(unblocked.status, 200)
  t.same(unblocked.body, { ok: true, payer: payer.toLowerCase() }, 'a checksummed address names the same payer')
  t.equal((await admin.blockedPayers.get(payer.toLowerCase()))?.operation, 'DEL', 'gone from the bucket the gateways watch')
  t.same((await admin.call('GET', '/admin/payers/blocked')).body, { payers: [] })

  const again = await admin.call('DELETE', `/admin/payers/blocked/${payer}`)
  t.equal(again.status, 404)
  t.same(again.body, { error: `blocked payer ${payer.toLowerCase()} not found` })
  const bad = await admin.call('DELETE', '/admin/payers/blocked/0x123')
  t.equal(bad.status, 400)
  t.match(bad.body, { error: /params\/address/ })
})

t.test('the agent allowlist and wallet-bound keys', async (t) => {
  const payer = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'
  const env: NodeJS.ProcessEnv = await baseTestEnv(t)
  const svc = await startService(t, adminService, env)
  const call = internalCall(svc.url)
  const nc = await connect({ servers: env.NATS_URL })
  t.teardown(() => nc.close())
  const channels = natsChannels(env.NATS_NAMESPACE!).admin

  t.test('PUT allows a payer with a policy, GET lists it, the NATS lookup finds it in any case, DELETE removes it', async (t) => {
    const put = await call('PUT', `/admin/agent-payers/${payer.toLowerCase()}`, {
      label: 'bot',
      policy: { maxUsdPerSwap: 25, allowedTokens: ['USDC', 'ARB'] },
    })
    t.equal(put.status, 200)
    t.match(put.body, {
      address: payer,
      label: 'bot',
      policy: { maxUsdPerSwap: 25, allowedTokens: ['USDC', 'ARB'] },
      createdAt: Number,
      updatedAt: Number,
    })
    const replaced = await call('PUT', `/admin/agent-payers/${payer}`, { policy: { maxUsdPerDay: 100 } })
    t.same(replaced.body.policy, { maxUsdPerDay: 100 }, 'the policy is replaced')
    t.equal(replaced.body.label, 'bot', 'the label is kept when not given')
    t.same(
      (await call('GET', '/admin/agent-payers')).body.payers.map((p: any) => p.address),
      [payer],
    )
    const found = await callEndpoint(nc, channels.agentPayer, { address: payer.toLowerCase() })
    t.match(found.payer, { address: payer, policy: { maxUsdPerDay: 100 } })
    t.same(await callEndpoint(nc, channels.agentPayer, { address: '0x0000000000000000000000000000000000000001' }), { payer: null })
    const removed = await call('DELETE', `/admin/agent-payers/${payer}`)
    t.same(removed.body, { ok: true, address: payer })
    t.equal((await call('DELETE', `/admin/agent-payers/${payer}`)).status, 404)
    t.same(await callEndpoint(nc, channels.agentPayer, { address: payer }), { payer: null })
  })

  t.test('a payer needs a policy; bad bodies and addresses are 400', async (t) => {
    const cases: Array<[string, unknown, RegExp]> = [
      [payer, {}, /policy/],
      [payer, { policy: {} }, /policy/],
      [payer, { policy: { maxUsdPerSwap: -1 } }, /maxUsdPerSwap/],
      [payer, { policy: { maxUsdPerSwap: 5 }, extra: true }, /extra|additional/],
      ['0x123', { policy: { maxUsdPerSwap: 5 } }, /address/],
    ]
    for (const [address, body, message] of cases) {
      const res = await call('PUT', `/admin/agent-payers/${address}`, body)
      t.equal(res.status, 400, JSON.stringify(body))
      t.match(res.body.error, message)
    }
  })

  t.test('a key may be bound to a wallet at creation: shown in the answer and the list, and in the key lookup', async (t) => {
    const created = await call('POST', '/admin/keys', { tier: 'readonly', label: 'my wallet', wallet: payer.toLowerCase() })
    t.equal(created.status, 201)
    t.equal(created.body.wallet, payer)
    const plain = await call('POST', '/admin/keys', { tier: 'readonly', label: 'no wallet' })
    t.equal(plain.body.wallet, null)
    const list = (await call('GET', '/admin/keys')).body.keys
    t.equal(list.find((k: any) => k.id === created.body.id).wallet, payer)
    const verified = await callEndpoint(nc, channels.keyVerify, { hash: hashApiKey(created.body.key) })
    t.same(verified.key, { id: created.body.id, tier: 'readonly', wallet: payer })
    const bad = await call('POST', '/admin/keys', { tier: 'readonly', label: 'x', wallet: 'my wallet' })
    t.equal(bad.status, 400)
    t.match(bad.body.error, /wallet/)
  })
})
