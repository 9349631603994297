import { baseTestEnv, startService } from '@ats/service-kit/testing'
import t from 'tap'
import { gatewayService } from '../src/service.ts'

/**
 * The web console's files as the gateway serves them: no key needed, the right content types, a
 * strict Content-Security-Policy, revalidated on every load with a content ETag; anything else
 * under /console is a plain 404 {error}. (The console in a browser: e2e/test/console.test.ts.)
 */
const gateway = await startService(t, gatewayService, await baseTestEnv(t))

t.test('the page, its script and stylesheet: no key, their content types, a strict CSP, no-cache with an ETag', async (t) => {
  const types = {
    '/console': /^text\/html/,
    '/console/': /^text\/html/,
    '/console/app.js': /^text\/javascript/,
    '/console/app.css': /^text\/css/,
  }
  for (const [path, type] of Object.entries(types)) {
    const res = await fetch(`${gateway.url}${path}`)
    t.equal(res.status, 200, `${path} without a key`)
    t.match(res.headers.get('content-type'), type, `${path}: its content type`)
    const csp = res.headers.get('content-security-policy') ?? ''
    t.match(csp, /default-src 'none'/, `${path}: nothing by default`)
    t.match(csp, /script-src 'self'(;|$)/, `${path}: scripts from the gateway only, none inline`)
    t.notMatch(csp, /unsafe-inline|unsafe-eval|https?:/, `${path}: no inline script, no other host`)
    t.match(csp, /frame-ancestors 'none'/)
    t.equal(res.headers.get('x-content-type-options'), 'nosniff')
    t.equal(res.headers.get('referrer-policy'), 'no-referrer')
    t.equal(res.headers.get('cache-control'), 'no-cache', `${path}: revalidated at every load`)
    t.match(res.headers.get('etag'), /^"[\w-]{22}"$/, `${path}: an ETag of its content`)
    await res.body?.cancel()
  }
})

t.test('the page names only the gateway’s own script and stylesheet, and no inline script', async (t) => {
  const page = await (await fetch(`${gateway.url}/console`)).text()
  t.match(page, /<script type="module" src="\/console\/app\.js"><\/script>/)
  t.match(page, /<link rel="stylesheet" href="\/console\/app\.css" \/>/)
  t.equal(page.match(/<script/g)?.length, 1, 'one script tag, with a src')
  t.notMatch(page, /https?:\/\//, 'no other host')
})

t.test('an unchanged file is a bodiless 304 when revalidated', async (t) => {
  const first = await fetch(`${gateway.url}/console/app.js`)
  const etag = first.headers.get('etag')!
  t.ok((await first.text()).length > 10_000, 'the bundle')
  const again = await fetch(`${gateway.url}/console/app.js`, { headers: { 'if-none-match': etag } })
  t.equal(again.status, 304)
  t.equal(await again.text(), '')
  const other = await fetch(`${gateway.url}/console/app.js`, { headers: { 'if-none-match': '"another"' } })
  t.equal(other.status, 200, 'another ETag: the file')
  await other.body?.cancel()
})

t.test('anything else under /console is a 404 with {error}, no stack', async (t) => {
  for (const path of ['/console/nope.js', '/console/../package.json', '/console/app.js.map']) {
    const res = await fetch(`${gateway.url}${path}`)
    t.equal(res.status, 404, path)
    const body = (await res.json()) as { error: string }
    t.type(body.error, 'string')
    t.same(Object.keys(body), ['error'], `${path}: only {error}`)
  }
})
