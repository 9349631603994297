import { blockedPayerCodec } from '@ats/contracts'
import t from 'tap'
import { freshAddress, startAdmin } from './helpers.ts'

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
  t.same(res.body, { payers: [{ payer: b, ...entry(1_000) }, { payer: c, ...entry(2_000) }, { payer: a, ...entry(3_000) }] })
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
