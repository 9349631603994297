import t from 'tap'
import { cachedLoader } from '../src/cache.ts'

/** A load that waits until the test lets it finish, so a get is in flight when the key changes. */
function gatedLoad() {
  const gates: Array<(value: string) => void> = []
  let calls = 0
  return {
    get calls() {
      return calls
    },
    load: () =>
      new Promise<string>((resolve) => {
        calls++
        gates.push(resolve)
      }),
    finish: (value: string) => gates.shift()!(value),
  }
}

t.test('a value set while a load is in flight answers its waiters, instead of failing them', async (t) => {
  const source = gatedLoad()
  const cache = cachedLoader<string, string>({ max: 10, ttlMs: 60_000, load: source.load })
  const waiting = cache.get('payer')
  const alsoWaiting = cache.get('payer')
  cache.set('payer', 'fresher')
  t.same(await Promise.all([waiting, alsoWaiting]), ['fresher', 'fresher'])
  source.finish('older')
  t.equal(await cache.get('payer'), 'fresher', 'the load it superseded is not cached')
  t.equal(source.calls, 1)
})

t.test('a key deleted while a load is in flight is loaded again for its waiters', async (t) => {
  const source = gatedLoad()
  const cache = cachedLoader<string, string>({ max: 10, ttlMs: 60_000, load: source.load })
  const waiting = cache.get('key')
  cache.delete('key')
  source.finish('before the delete')
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(source.calls, 2, 'a new load for the waiter')
  source.finish('after the delete')
  t.equal(await waiting, 'after the delete')
})

t.test("a load's own failure still reaches its caller", async (t) => {
  const cache = cachedLoader<string, string>({
    max: 10,
    ttlMs: 60_000,
    load: async () => {
      throw new Error('upstream down')
    },
  })
  await t.rejects(cache.get('key'), { message: 'upstream down' })
})
