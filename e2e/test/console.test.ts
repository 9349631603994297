import { mkdirSync } from 'node:fs'
import { chromiumArgs, chromiumPath } from '@ats/service-kit/testing'
import { chromium } from 'playwright-core'
import t from 'tap'
import { adminKey, eventually, startAgentFleet, startReceiver } from './fleet.ts'

/**
 * The web console at /console in a real headless Chromium, against the whole fleet on the
 * devnet, as a person uses it: sign in with an admin key; approve one held swap and reject
 * another (the approved one is mined once, the rejected one never); create a key (its raw value
 * shown once, and it works) and revoke it (it stops working); pause and resume the server
 * wallet; see a paid request appear in revenue; send a webhook's test event. With
 * CONSOLE_SCREENSHOTS=<dir> it also saves a screenshot of each page there (docs/console/).
 */
const screenshots = process.env.CONSOLE_SCREENSHOTS
if (screenshots) mkdirSync(screenshots, { recursive: true })

t.test('the console: approvals, keys, the wallet switch, revenue and webhooks, clicked through in Chromium', async (t) => {
  const fleet = await startAgentFleet(t, {
    adminEnv: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'true' },
  })
  const { request, createKey, publicClient, serverWallet } = fleet
  const base = fleet.gateway.url
  const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
  const fiftyUsdc = { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000' }

  // a key whose policy holds swaps over $10; the server wallet's router allowance set once first
  const asker = await createKey('readwrite', 'trading desk bot', { approvalAboveUsd: 10 })
  const warm = await request('/swap/execute', { method: 'POST', key: asker.key, body: { ...fiftyUsdc, amountIn: '1000000' } })
  t.equal(warm.status, 200, 'a $1 swap runs at once')
  const hold = async () => {
    const res = await request('/swap/execute', { method: 'POST', key: asker.key, body: fiftyUsdc })
    if (res.status !== 202) throw new Error(`expected 202, got ${res.status} ${JSON.stringify(res.body)}`)
    return res.body.approval as { id: string; links: { console: string } }
  }
  const toApprove = await hold()
  const toReject = await hold()
  const decidedElsewhere = await hold()
  t.equal(toApprove.links.console, `/console/#/approvals/${toApprove.id}`, "an approval's console link")

  const browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumArgs, headless: true })
  t.teardown(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } })
  const page = await context.newPage()
  const errors: string[] = []
  page.on('pageerror', (error) => errors.push(error.message))
  const outside: string[] = []
  page.on('request', (r) => {
    if (!r.url().startsWith(base)) outside.push(r.url())
  })
  // the confirmations (revoke, pause, resume) are accepted
  page.on('dialog', (dialog) => void dialog.accept())
  const shot = async (name: string, p = page) => {
    if (screenshots) await p.screenshot({ path: `${screenshots}/${name}.png`, fullPage: true })
  }

  t.test('sign-in: a wrong key is refused with the API’s words; the right one is kept for the tab only', async (t) => {
    const res = await page.goto(`${base}${toApprove.links.console}`)
    t.equal(res?.status(), 200)
    t.match(res?.headers()['content-security-policy'], /script-src 'self'/, 'a strict CSP')
    await page.getByLabel('API key').fill('atsk_not-a-key-of-this-fleet-000000')
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('alert').filter({ hasText: /./ }).waitFor()
    const refusal = await page.getByRole('alert').filter({ hasText: /./ }).textContent()
    const api = await request('/approvals?limit=1', { key: 'atsk_not-a-key-of-this-fleet-000000' })
    t.equal(refusal, api.body.error, 'the API’s own error text')
    await shot('signin')
    await page.getByLabel('API key').fill(adminKey)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('heading', { name: 'Approvals' }).waitFor()
    t.equal(await page.evaluate(() => sessionStorage.getItem('ats-console-key')), adminKey, 'in sessionStorage')
    t.notOk(page.url().includes(adminKey), 'never in the URL')
  })

  t.test('approvals: one approved (mined once), one rejected with a reason (never sent)', async (t) => {
    const approveCard = page.locator(`article[data-approval="${toApprove.id}"]`)
    const rejectCard = page.locator(`article[data-approval="${toReject.id}"]`)
    await approveCard.waitFor()
    await rejectCard.waitFor()
    // one decided elsewhere (another approver, with the API) leaves the page by itself
    const elsewhereCard = page.locator(`article[data-approval="${decidedElsewhere.id}"]`)
    await elsewhereCard.waitFor()
    const elsewhere = await request(`/approvals/${decidedElsewhere.id}/reject`, {
      method: 'POST',
      key: adminKey,
      body: { reason: 'decided by another approver' },
    })
    t.equal(elsewhere.status, 200, 'rejected through the API')
    await elsewhereCard.waitFor({ state: 'detached', timeout: 10_000 })
    t.equal(await elsewhereCard.count(), 0, 'a decision made elsewhere left the page without a click')
    t.match(await approveCard.getAttribute('class'), /highlight/, 'the linked approval stands out')
    t.match(await approveCard.textContent(), /USD value\s*\$50\.00/)
    await approveCard
      .getByText(/price impact .*block \d+/)
      .first()
      .waitFor()
    await shot('approvals')

    const before = await nonceOf()
    await approveCard.getByRole('button', { name: 'Approve' }).click()
    const mined = new RegExp(`Approved ${toApprove.id}: the swap was mined in transaction 0x[0-9a-f]{64}`)
    // the page keeps what was decided here (a decided card leaves the pending list)
    const decidedHere = page.getByRole('status', { name: 'Decided here' })
    await decidedHere.filter({ hasText: mined }).waitFor()
    const approved = await request(`/approvals/${toApprove.id}`, { key: adminKey })
    t.match(approved.body, { status: 'approved', result: { success: true, hash: /^0x/ } })
    t.equal(await nonceOf(), before + 1, 'one transaction from the server wallet')
    const executions = (await request('/swap/executions', { key: asker.key })).body.executions as Array<{ hash: string }>
    t.equal(executions.filter((e) => e.hash === approved.body.result.hash).length, 1, 'executed once')

    await rejectCard.getByLabel(/Reason to reject/).fill('too large for today')
    await rejectCard.getByRole('button', { name: 'Reject' }).click()
    await decidedHere.filter({ hasText: `Rejected ${toReject.id}: nothing was sent` }).waitFor()
    const rejected = await request(`/approvals/${toReject.id}`, { key: adminKey })
    t.match(rejected.body, { status: 'rejected', decisionReason: 'too large for today', result: null })
    t.equal(await nonceOf(), before + 1, 'nothing more was sent')
    // decided, both leave the pending list by themselves (the page polls)
    await page.getByText('Nothing waits for a decision.').waitFor()
  })

  t.test('keys: created with its raw key shown once and working; revoked, it stops working', async (t) => {
    await page.getByRole('link', { name: 'Keys' }).click()
    await page.getByRole('heading', { name: 'API keys' }).waitFor()
    await page.getByText('Create a key').click()
    await page.getByLabel(/^Tier/).selectOption('readonly')
    await page.getByLabel(/^Label/).fill('price dashboard')
    await page.getByRole('button', { name: 'Create key' }).click()
    const raw = (await page.locator('[data-raw-key]').textContent())?.trim()
    t.match(raw, /^atsk_/, 'the raw key, shown once')
    t.equal((await request('/market/prices', { key: raw })).status, 200, 'and it works')
    await shot('keys')
    const created = (await request('/admin/keys', { key: adminKey })).body.keys.find(
      (k: { label: string }) => k.label === 'price dashboard',
    )
    const row = page.locator(`article[data-key="${created.id}"]`)
    await row.getByRole('button', { name: 'Revoke' }).click()
    await page
      .getByRole('status')
      .filter({ hasText: `Key ${created.id} (price dashboard) revoked` })
      .waitFor()
    t.equal(await row.count(), 0, 'it leaves the list')
    const refused = await eventually('the revoked key refused', async () => {
      const res = await request('/market/prices', { key: raw })
      return res.status === 401 ? res : undefined
    })
    t.equal(refused.status, 401, 'revoked: refused')

    // the spend policy edited: a refused value shows the API's words, a good one is saved
    const desk = page.locator(`article[data-key="${asker.id}"]`)
    await desk.getByRole('button', { name: 'Edit policy' }).click()
    await desk.getByLabel(/^Highest price impact/).fill('0')
    await desk.getByRole('button', { name: 'Save policy' }).click()
    const refusal = await desk.getByRole('alert').filter({ hasText: /./ }).textContent()
    const api = await request(`/admin/keys/${asker.id}/policy`, {
      method: 'PUT',
      key: adminKey,
      body: { policy: { approvalAboveUsd: 10, maxPriceImpactBps: 0 } },
    })
    t.equal(api.status, 400)
    t.equal(refusal, api.body.error, 'a refused policy: the API’s own error text')
    await desk.getByLabel(/^Highest price impact/).fill('300')
    await desk.getByLabel(/^Most per swap/).fill('100')
    await desk.getByRole('button', { name: 'Save policy' }).click()
    await desk
      .getByRole('status')
      .filter({ hasText: `Policy of ${asker.id} saved` })
      .waitFor()
    const saved = (await request('/admin/keys', { key: adminKey })).body.keys.find((k: { id: string }) => k.id === asker.id)
    t.same(saved.policy, { approvalAboveUsd: 10, maxPriceImpactBps: 300, maxUsdPerSwap: 100 }, 'the policy saved')
  })

  t.test('wallet: paused with a reason, then resumed, each confirmed', async (t) => {
    await page.getByRole('link', { name: 'Wallet' }).click()
    await page.getByLabel(/^Reason/).fill('incident drill')
    await page.getByRole('button', { name: 'Pause spending' }).click()
    await page.getByRole('status').filter({ hasText: 'The server wallet is paused' }).waitFor()
    t.match((await request('/admin/wallet', { key: adminKey })).body, { paused: true, reason: 'incident drill' })
    const refused = await request('/swap/execute', { method: 'POST', key: asker.key, body: { ...fiftyUsdc, amountIn: '1000000' } })
    t.equal(refused.status, 423, 'a swap is refused while paused')
    await shot('wallet')
    await page.getByRole('button', { name: 'Resume spending' }).click()
    await page.getByRole('status').filter({ hasText: 'The server wallet spends again' }).waitFor()
    t.match((await request('/admin/wallet', { key: adminKey })).body, { paused: false })
  })

  t.test('revenue: a paid request appears, with the settlement figures and the history chart', async (t) => {
    const paid = await fetch(`${base}/agent/skills`, { headers: { 'x-payment': await fleet.pay() } })
    t.equal(paid.status, 200)
    const requestId = paid.headers.get('x-request-id')
    await paid.body?.cancel()
    await page.getByRole('link', { name: 'Revenue' }).click()
    await page.locator(`tr[data-request-id="${requestId}"]`).waitFor({ timeout: 20_000 })
    t.match(await page.locator(`tr[data-request-id="${requestId}"]`).textContent(), /GET \/agent\/skills\s*\$0\.01/)
    // the chart is drawn from its own request (the history), which may answer after the table's
    await page.locator('svg.chart rect').first().waitFor({ state: 'attached' })
    t.ok(await page.locator('svg.chart rect').count(), 'the daily chart has its bars')
    t.match(await page.getByText('Settlement backlog').locator('..').textContent(), /Settlement backlog\s*\d+/)
    await shot('revenue')
  })

  t.test('webhooks: a subscription, a test event sent, its delivery listed', async (t) => {
    const receiver = await startReceiver(t)
    const made = await request('/webhooks', {
      method: 'POST',
      key: adminKey,
      body: { url: receiver.url('/hook'), events: ['job.completed'] },
    })
    t.equal(made.status, 201)
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('button', { name: 'Send a test event' }).click()
    await page
      .getByRole('status')
      .filter({ hasText: /Test event delivered: the receiver answered 204/ })
      .waitFor()
    t.equal(receiver.received.length, 1, 'the receiver got it')
    await page.getByRole('button', { name: 'Show deliveries' }).click()
    await page.getByText('webhook.test').first().waitFor()
    // a test event cannot be redelivered: the refusal shows the API's own words
    const testDelivery = (await request(`/webhooks/${made.body.id}/deliveries`, { key: adminKey })).body.deliveries[0]
    t.match(testDelivery, { eventType: 'webhook.test', status: 'succeeded' })
    await page.getByRole('button', { name: `Redeliver webhook.test ${testDelivery.id}` }).click()
    const api = await request(`/webhooks/${made.body.id}/deliveries/${testDelivery.id}/redeliver`, { method: 'POST', key: adminKey })
    t.equal(api.status, 409)
    const refusal = page.getByRole('alert').filter({ hasText: api.body.error })
    await refusal.waitFor()
    t.equal(await refusal.count(), 1, 'the refused redeliver shows the API’s error text')
    await shot('webhooks')
  })

  t.test('a key allowed to approve signs in too, and sees the approvals and webhooks pages only', async (t) => {
    const approver = await createKey('readwrite', 'on-call approver')
    const own = await browser.newContext({ viewport: { width: 1200, height: 900 } })
    t.teardown(() => own.close())
    const tab = await own.newPage()
    tab.on('pageerror', (error) => errors.push(error.message))
    await tab.goto(`${base}/console`)
    await tab.getByLabel('API key').fill(approver.key)
    await tab.getByRole('button', { name: 'Sign in' }).click()
    await tab.getByRole('heading', { name: 'Approvals' }).waitFor()
    await tab.getByText('approver key').waitFor()
    const nav = tab.getByRole('navigation', { name: 'Console pages' }).getByRole('link')
    t.same(await nav.allTextContents(), ['Approvals', 'Webhooks'], 'no admin pages')
    await tab.goto(`${base}/console/#/keys`)
    await tab.getByRole('heading', { name: 'Approvals' }).waitFor()
    t.equal(await tab.getByRole('heading', { name: 'API keys' }).count(), 0, 'an admin page by its URL shows approvals instead')
  })

  t.test('at phone width the pages stay usable', async (t) => {
    // the same tab (the key is the tab's), narrowed
    const phone = page
    await phone.setViewportSize({ width: 390, height: 844 })
    await phone.goto(`${base}/console/#/approvals`)
    await phone.getByRole('heading', { name: 'Approvals' }).waitFor()
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
    t.ok(overflow <= 1, `no sideways scrolling (${overflow} px)`)
    await phone.getByRole('link', { name: 'Wallet' }).click()
    await phone.getByRole('button', { name: 'Pause spending' }).waitFor()
    await shot('phone-wallet', phone)
  })

  t.test('nothing came from anywhere but the gateway, and the page raised no error', async (t) => {
    t.same(outside, [])
    t.same(errors, [])
  })

  t.test('on chain, the approved swap was made once and the others never', async (t) => {
    const executions = (await request('/swap/executions', { key: asker.key })).body.executions as Array<{ hash: string }>
    const approved = (await request(`/approvals/${toApprove.id}`, { key: adminKey })).body
    t.same(
      executions.map((e) => e.hash).sort(),
      [warm.body.hash, approved.result.hash].sort(),
      "the key's only swaps: the $1 one and the approved one",
    )
    for (const id of [toReject.id, decidedElsewhere.id]) {
      t.match((await request(`/approvals/${id}`, { key: adminKey })).body, { status: 'rejected', result: null }, `${id} never sent`)
    }
  })
})
