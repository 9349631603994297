import t from 'tap'
import { Type } from 'typebox'
import { loadConfig, StartupError } from '../src/config.ts'

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
