import { loadConfig, StartupError } from '@ats/service-kit'
import t from 'tap'
import { gatewaySettings, trustProxyOf } from '../src/settings.ts'

const { TRUST_PROXY, PAY_TO, AGENT_URL } = gatewaySettings
const settings = { TRUST_PROXY, PAY_TO, AGENT_URL }

t.test('values that used to start and then fail are refused at start, naming the setting', async (t) => {
  const refused: Array<[NodeJS.ProcessEnv, RegExp]> = [
    [{ TRUST_PROXY: 'yes' }, /^invalid setting TRUST_PROXY: must be false, true, a hop count, or comma-separated addresses\/CIDRs \("yes" is none of them\)/],
    [{ TRUST_PROXY: '10.0.0.0/8,proxy.internal' }, /"proxy.internal" is none of them/],
    [{ PAY_TO: '0xA0Ee7A142d267C1f36714E4a8F75612F20a79720' }, /^invalid setting PAY_TO: must be a 0x address whose mixed case is a valid EIP-55 checksum/],
    [{ AGENT_URL: 'localhost:3001' }, /^invalid setting AGENT_URL: must be an absolute http\(s\) URL/],
  ]
  for (const [env, message] of refused) {
    const error = t.throws(() => loadConfig(settings, env), JSON.stringify(env)) as Error
    t.type(error, StartupError)
    t.match(error.message, message)
  }
})

t.test('good values pass as they are', async (t) => {
  const config = loadConfig(settings, {
    TRUST_PROXY: '10.0.0.0/8, 192.168.1.1,loopback,::1',
    PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720',
    AGENT_URL: 'http://agent:3001',
  })
  t.same(config, { TRUST_PROXY: '10.0.0.0/8, 192.168.1.1,loopback,::1', PAY_TO: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720', AGENT_URL: 'http://agent:3001' })
  t.equal(loadConfig(settings, { PAY_TO: '0xa0ee7a142d267c1f36714e4a8f75612f20a79720' }).PAY_TO, '0xa0ee7a142d267c1f36714e4a8f75612f20a79720', 'lower case has no checksum to check')
  t.equal(trustProxyOf(loadConfig(settings, { TRUST_PROXY: '2' }).TRUST_PROXY), 2)
})
