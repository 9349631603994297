import { mkdir } from 'node:fs/promises'
import { publicRoutes } from '@ats/contracts'
import { baseTestEnv, chromiumArgs as args, chromiumPath as executablePath, startService } from '@ats/service-kit/testing'
import { chromium } from 'playwright-core'
import t from 'tap'
import { routeTable } from '../src/routing/routeTable.ts'
import { gatewayService } from '../src/service.ts'

t.test('GET /docs renders the API reference in a real headless Chromium, every route group listed, nothing from a CDN', async (t) => {
  const gateway = await startService(t, gatewayService, await baseTestEnv(t))
  const root = (await (await fetch(`${gateway.url}/`)).json()) as { docs: string; openapi: string }
  t.equal(root.docs, '/docs', 'GET / names the reference page')
  t.equal(root.openapi, '/openapi.json')

  const browser = await chromium.launch({ executablePath, args, headless: true })
  t.teardown(() => browser.close())
  const page = await browser.newPage()
  const requested: string[] = []
  page.on('request', (request) => requested.push(request.url()))
  const errors: string[] = []
  page.on('pageerror', (error) => errors.push(error.message))

  const response = await page.goto(`${gateway.url}${root.docs}`, { waitUntil: 'networkidle' })
  t.equal(response?.status(), 200)
  await page.waitForSelector('.opblock-tag-section', { timeout: 20_000 })
  const sections = await page.$$eval('.opblock-tag-section h3', (headings) => headings.map((h) => h.getAttribute('data-tag')))
  const groups = ['gateway', ...routeTable.map((g) => g.prefix)]
  t.same(sections, groups, 'one section per route group, in the route table order')
  const title = await page.textContent('.info .title')
  t.match(title, /Agent Trading Service API/)
  // every operation of the document is on the page (sections are expanded: docExpansion list)
  const operations = await page.$$eval('.opblock', (blocks) => blocks.length)
  t.equal(operations, publicRoutes.length, 'every public route is listed')

  const outside = requested.filter((url) => !url.startsWith(gateway.url) && !url.startsWith('data:'))
  t.same(outside, [], 'every asset from the gateway itself')
  t.same(errors, [], 'no script errors')

  await mkdir(new URL('./screenshots/', import.meta.url), { recursive: true })
  const path = new URL('./screenshots/docs.png', import.meta.url).pathname
  const png = await page.screenshot({ path, fullPage: false })
  t.same([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], `a PNG screenshot at ${path}`)
  t.ok(png.length > 10_000, `the page drew something (${png.length} bytes)`)
})
