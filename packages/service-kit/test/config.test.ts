// Settings: how loadConfig converts, defaults and refuses values at start, and how secrets in
// settings (tokens, passwords in NATS and Redis URLs) never reach an error message.
import t from 'tap'
import { Type } from 'typebox'
import { chainSettings, checkAddressBook } from '../src/chain.ts'
import { baseSettings, httpUrlSetting, loadConfig, StartupError } from '../src/config.ts'
import { createService, type ServiceDefinition } from '../src/service.ts'
import { testInfra, testInternalToken } from '../src/testing.ts'

// loadConfig: conversion, defaults and refusals
const settings = {
  PORT: Type.Integer({ minimum: 1, default: 3000 }),
  TOKEN: Type.String({ minLength: 8, secret: true, description: 'the shared token' }),
  FLAG: Type.Optional(Type.Boolean()),
}

t.test('values are converted and defaults applied', async (t) => {
  t.same(loadConfig(settings, { TOKEN: 'abcdefgh', FLAG: 'true' }), { PORT: 3000, TOKEN: 'abcdefgh', FLAG: true })
  t.same(loadConfig(settings, { PORT: '8080', TOKEN: 'abcdefgh', FLAG: '' }), { PORT: 8080, TOKEN: 'abcdefgh' })
})

t.test('a missing required setting is named with what it is for', async (t) => {
  t.throws(() => loadConfig(settings, {}), new StartupError('missing setting TOKEN: the shared token'))
})

t.test('an invalid setting is named and its value shown', async (t) => {
  t.throws(() => loadConfig(settings, { PORT: 'eighty', TOKEN: 'abcdefgh' }), { message: /^invalid setting PORT: .*\(got "eighty"\)$/ })
})

t.test('an invalid secret is named but its value never shown', async (t) => {
  const error = t.throws(() => loadConfig(settings, { TOKEN: 'short' })) as Error
  t.match(error.message, /^invalid setting TOKEN/)
  t.notMatch(error.message, /short/)
})

t.test('a setting whose value starts but fails later is refused at start: URLs, tokens, timers, huge integers, booleans', async (t) => {
  const kit = {
    ...baseSettings,
    ...chainSettings,
    UPSTREAM: httpUrlSetting({ default: 'http://127.0.0.1:1' }),
    WAIT_MS: Type.Integer({ minimum: 1, default: 10 }),
  }
  const base = { INTERNAL_TOKEN: 'a-good-internal-token' }
  const refused: Array<[NodeJS.ProcessEnv, string]> = [
    [
      { UPSTREAM: 'localhost:3001' },
      'invalid setting UPSTREAM: must be an absolute http(s) URL, like http://host:port (got "localhost:3001")',
    ],
    [
      { UPSTREAM: 'ftp://files.example' },
      'invalid setting UPSTREAM: must be an absolute http(s) URL, like http://host:port (got "ftp://files.example")',
    ],
    [{ RPC_URL: 'ws://127.0.0.1:8545' }, 'invalid setting RPC_URL: must be an absolute http(s) URL, like http://host:port'],
    [{ CHAIN_ID: '1' }, 'invalid setting CHAIN_ID: must be 42161 (Arbitrum One) or 31337 (the devnet) (got "1")'],
    [
      { INTERNAL_TOKEN: 'sixteen chars with spaces' },
      'invalid setting INTERNAL_TOKEN: must be 16 or more visible ASCII characters (no spaces); make one with: openssl rand -hex 24',
    ],
    [
      { INTERNAL_TOKEN: 'token-with-an-émoji-🙂' },
      'invalid setting INTERNAL_TOKEN: must be 16 or more visible ASCII characters (no spaces); make one with: openssl rand -hex 24',
    ],
    [{ WAIT_MS: '9999999999' }, 'invalid setting WAIT_MS: must be at most 2147483647 ms (about 24 days) (got "9999999999")'],
    [
      { BODY_LIMIT_BYTES: '99999999999999999999999' },
      'invalid setting BODY_LIMIT_BYTES: must be <= 67108864 (got "99999999999999999999999")',
    ],
  ]
  for (const [env, message] of refused) t.throws(() => loadConfig(kit, { ...base, ...env }), new StartupError(message), JSON.stringify(env))
  const flag = { ON: Type.Boolean({ default: false }), HUGE: Type.Integer({ default: 1 }) }
  t.throws(() => loadConfig(flag, { ON: 'yes' }), new StartupError('invalid setting ON: must be true or false (or 1 or 0) (got "yes")'))
  t.throws(() => loadConfig(flag, { HUGE: '99999999999999999999999' }), {
    message: /^invalid setting HUGE: must be between -9007199254740991 and 9007199254740991/,
  })
  t.match(loadConfig(kit, { ...base, UPSTREAM: 'https://api.example.com/v1', WAIT_MS: '2147483647', CHAIN_ID: '31337' }), {
    UPSTREAM: 'https://api.example.com/v1',
    WAIT_MS: 2147483647,
    CHAIN_ID: 31337,
    BODY_LIMIT_BYTES: 1048576,
  })
})

t.test('a chain id without an address book is refused at start, naming the file', async (t) => {
  const config = { RPC_URL: 'http://127.0.0.1:8545', CHAIN_ID: 31337, ADDRESS_BOOK: '/nonexistent/address-book.json' }
  t.throws(() => checkAddressBook(config), {
    name: 'StartupError',
    message: /^invalid setting ADDRESS_BOOK: address book \/nonexistent\/address-book.json not found/,
  })
  t.doesNotThrow(() => checkAddressBook({ ...config, CHAIN_ID: 42161 }), "Arbitrum One's book is built in")
})

// secrets in settings are never printed, even when createService fails with them
const quiet: ServiceDefinition<{}, never> = { name: 'quiet', version: '1.0.0', port: 0, redis: 'optional', async register() {} }
const env = { INTERNAL_TOKEN: testInternalToken, LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0' }

t.test('a NATS URL with a password is never printed, even when NATS is unreachable', async (t) => {
  const error = await createService(quiet, { ...env, NATS_URL: 'nats://fleet:hunter2-nats-secret@127.0.0.1:1' }).catch((e: Error) => e)
  t.type(error, Error)
  t.match((error as Error).message, /NATS is not reachable at nats:\/\/fleet:\*\*\*@127\.0\.0\.1:1/)
  t.notMatch((error as Error).message, /hunter2/)
})

t.test('a Redis URL with a password is never printed, even when Redis is unreachable', async (t) => {
  const { natsUrl } = await testInfra()
  const error = await createService(quiet, { ...env, NATS_URL: natsUrl, REDIS_URL: 'redis://:hunter2-redis-secret@127.0.0.1:1' }).catch(
    (e: Error) => e,
  )
  t.type(error, Error)
  t.match((error as Error).message, /Redis is not reachable at redis:\/\/:\*\*\*@127\.0\.0\.1:1/)
  t.notMatch((error as Error).message, /hunter2/)
})

t.test('a bad secret setting is named without echoing it', async (t) => {
  const { natsUrl } = await testInfra()
  const error = await createService(quiet, { ...env, NATS_URL: natsUrl, INTERNAL_TOKEN: 'short-hunter2' }).catch((e: Error) => e)
  t.match((error as Error).message, /invalid setting INTERNAL_TOKEN/)
  t.notMatch((error as Error).message, /hunter2/)
})
