import t from 'tap'
import { createService, type ServiceDefinition } from '../src/service.ts'
import { testInfra, testInternalToken } from '../src/testing.ts'

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
