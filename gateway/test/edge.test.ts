import { baseTestEnv, testInfra } from '@ats/service-kit/testing'
import { createService, StartupError } from '@ats/service-kit'
import t, { type Test } from 'tap'
import { gatewayService } from '../src/service.ts'

/** A gateway alone (no admin answers its key lookups), tested without a socket. */
async function gateway(t: Test, env: NodeJS.ProcessEnv = {}) {
  const svc = await createService(gatewayService, { ...(await baseTestEnv(t)), ...env })
  t.teardown(() => svc.close())
  return svc
}

t.test('/ready and /metrics answer on the operations port only, never on the public one', async (t) => {
  const svc = await gateway(t)
  t.equal((await svc.app.inject({ url: '/ready' })).statusCode, 404)
  t.equal((await svc.app.inject({ url: '/metrics' })).statusCode, 404)
  t.equal((await svc.app.inject({ url: '/health' })).statusCode, 200, 'liveness stays public')
  const ready = await svc.ops.inject({ url: '/ready' })
  t.equal(ready.statusCode, 200)
  t.match(ready.json(), { ready: true, checks: ['nats'] })
  const metrics = await svc.ops.inject({ url: '/metrics' })
  t.equal(metrics.statusCode, 200)
  t.match(metrics.body, /http_request_duration_seconds/)
})

t.test('a key that does not match the key format gets 401 without asking admin', async (t) => {
  const svc = await gateway(t)
  const res = await svc.app.inject({ url: '/market/prices', headers: { authorization: 'Bearer atsk_too-short-to-be-a-key' } })
  t.equal(res.statusCode, 401, 'no admin runs here: a lookup would have answered 503')
  t.same(res.json(), { error: 'malformed API key: keys are atsk_ followed by 32 characters' })
  const wellFormed = await svc.app.inject({ url: '/market/prices', headers: { authorization: `Bearer atsk_${'x'.repeat(32)}` } })
  t.equal(wellFormed.statusCode, 503, 'a well-formed key is looked up, and admin is not there')
})

t.test('a flood of failed authentications from one address gets 429 with retry-after; other addresses do not', async (t) => {
  const svc = await gateway(t, { AUTH_FAILURE_LIMIT: '3' })
  const attempt = (remoteAddress: string) =>
    svc.app.inject({ url: '/swap/quote', remoteAddress, headers: { authorization: 'Bearer atsk_guess' } })
  for (let i = 0; i < 3; i++) t.equal((await attempt('203.0.113.7')).statusCode, 401, `failure ${i + 1} is a plain 401`)
  const refused = await attempt('203.0.113.7')
  t.equal(refused.statusCode, 429)
  t.match(refused.json(), { error: /^too many failed authentications from this address; retry in \d+ s$/ })
  t.ok(Number(refused.headers['retry-after']) > 0, 'retry-after says when')
  t.equal((await attempt('198.51.100.1')).statusCode, 401, 'another address is not affected')
})

t.test('the 402 names the resource from PUBLIC_URL, never from the Host a client sends', async (t) => {
  // Arbitrum One's address book is built in: no chain is needed to answer a 402
  const paid = { CHAIN_ID: '42161', PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720', RPC_URL: 'http://127.0.0.1:9', REDIS_URL: (await testInfra()).redisUrl }
  const bare = await gateway(t, paid)
  const spoofed = await bare.app.inject({ url: '/agent/skills', headers: { host: 'evil.example' } })
  t.equal(spoofed.statusCode, 402)
  t.notMatch(spoofed.body, /evil\.example/)
  t.match(spoofed.json().accepts[0].resource, /^http:\/\/localhost:\d+\/agent\/skills$/)
  const configured = await gateway(t, { ...paid, PUBLIC_URL: 'https://api.example.com' })
  const res = await configured.app.inject({ url: '/agent/skills', headers: { host: 'evil.example' } })
  t.equal(res.json().accepts[0].resource, 'https://api.example.com/agent/skills')
})

t.test('SKIP_PAYMENT=true is refused at start on Arbitrum One', async (t) => {
  await t.rejects(
    gateway(t, { SKIP_PAYMENT: 'true', CHAIN_ID: '42161', PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720' }),
    StartupError,
  )
  await t.rejects(gateway(t, { SKIP_PAYMENT: 'true', CHAIN_ID: '42161' }), /SKIP_PAYMENT=true is refused on Arbitrum One/)
})

t.test('paid routes refuse to start without Redis: nonces per process could be replayed on another replica or after a restart', async (t) => {
  const paid = { CHAIN_ID: '42161', PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720', RPC_URL: 'http://127.0.0.1:9' }
  await t.rejects(gateway(t, paid), { name: 'StartupError', message: /^paid routes need Redis: set REDIS_URL/ })
  const free = await gateway(t)
  t.equal((await free.app.inject({ url: '/health' })).statusCode, 200, 'a gateway without paid routes (no PAY_TO) still starts without Redis')
})
