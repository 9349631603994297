import { execFileSync } from 'node:child_process'
import { apiKeyPattern } from '@ats/contracts'
import { loadConfig, StartupError } from '@ats/service-kit'
import t from 'tap'
import { adminService } from '../../src/service.ts'

const settings = { ADMIN_API_KEY: adminService.settings!.ADMIN_API_KEY, FACILITATOR_URL: adminService.settings!.FACILITATOR_URL }

t.test('an ADMIN_API_KEY the gateway would refuse stops admin at start, saying how to make one', async (t) => {
  const hex64 = 'a1'.repeat(32)
  for (const bad of [hex64, 'atsk_too-short', `atsk_${'x'.repeat(31)}!`, `ATSK_${'x'.repeat(32)}`]) {
    const error = t.throws(() => loadConfig(settings, { ADMIN_API_KEY: bad })) as Error
    t.type(error, StartupError)
    t.equal(
      error.message,
      'invalid setting ADMIN_API_KEY: must be an API key: atsk_ followed by 32 characters of A-Z a-z 0-9 _ -; make one with: ADMIN_API_KEY=atsk_$(openssl rand -hex 16)',
    )
    t.notMatch(error.message, bad, 'the secret is not echoed')
  }
})

t.test('the command the message shows makes a key of the format', async (t) => {
  const key = `atsk_${execFileSync('openssl', ['rand', '-hex', '16']).toString().trim()}`
  t.match(key, apiKeyPattern)
  t.equal(loadConfig(settings, { ADMIN_API_KEY: key }).ADMIN_API_KEY, key)
})

t.test('FACILITATOR_URL must be an http(s) URL', async (t) => {
  t.throws(() => loadConfig(settings, { FACILITATOR_URL: 'facilitator.example.com' }), {
    message: /^invalid setting FACILITATOR_URL: must be an absolute http\(s\) URL/,
  })
  t.equal(loadConfig(settings, { FACILITATOR_URL: 'https://x402.example.com' }).FACILITATOR_URL, 'https://x402.example.com')
})
