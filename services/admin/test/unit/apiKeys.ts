import { apiKeyPattern, hashApiKey } from '@ats/contracts'
import t from 'tap'
import { generateApiKey, visiblePrefix } from '../../src/keys/apiKeys.ts'

t.test('api keys carry the scannable prefix and 192 random bits', async (t) => {
  const a = generateApiKey()
  const b = generateApiKey()
  t.match(a, apiKeyPattern)
  t.not(a, b)
  t.match(hashApiKey(a), /^[0-9a-f]{64}$/)
  t.equal(visiblePrefix(a).length, 12)
  t.ok(a.startsWith(visiblePrefix(a)))
})
