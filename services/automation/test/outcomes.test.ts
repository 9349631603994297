import { compareSchemaWithDatabase, scrapeMetric, startService } from '@ats/service-kit/testing'
import pg from 'pg'
import t from 'tap'
import { getAddress, type Address } from 'viem'
import { automationService } from '../src/service.ts'
import { eventually, keyHeaders, startAutomationStack } from './helpers.ts'

t.test('outcomes: repeated failures, a limit order that waits and one that fills, and a restart after downtime', async (top) => {
  // a routes-only replica at first: the test decides when a scheduler runs
  const stack = await startAutomationStack(top, { env: { AUTOMATION_SCHEDULER: 'false' } })
  const { devnet, call } = stack
  const wallet = getAddress(devnet.accounts[8]!.address) as Address
  const keyId = await stack.createKey(wallet)
  const get = async (id: string, key = keyId) => (await call(`/automations/${id}`, { headers: keyHeaders(key) })).body.automation
  const runsOf = async (id: string, key = keyId) => (await call(`/automations/${id}/runs`, { headers: keyHeaders(key) })).body.runs as any[]
  const create = async (key: string, type: string, config: Record<string, unknown>) => {
    const res = await call('/automations', { headers: keyHeaders(key), body: { walletAddress: wallet, type, name: type, config } })
    if (res.status !== 201) throw new Error(JSON.stringify(res.body))
    return res.body.automation.id as string
  }

  // every hour, but last run five hours ago (the service was down): it is due now, once
  const hourly = await create(keyId, 'recurring-buy', { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1h' })
  const db = new pg.Client({ connectionString: stack.env.DATABASE_URL, options: '-c search_path=automation' })
  await db.connect()
  top.teardown(() => db.end())
  await db.query(`UPDATE automations SET next_run_at = now() - interval '5 hours' WHERE id = $1`, [hourly])

  // a key that may only swap WETH: each run of its USDC->ARB buy is refused by trading
  const narrow = await stack.createKey(wallet, { allowedTokens: ['WETH'] })
  const refused = await create(narrow, 'recurring-buy', { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1s' })
  const waiting = await create(keyId, 'limit-order', {
    tokenIn: 'USDC',
    tokenOut: 'ARB',
    amount: '1000000',
    minAmountOut: '1000000000000000000000000',
    checkEvery: '1s',
  })
  const filling = await create(keyId, 'limit-order', {
    tokenIn: 'USDC',
    tokenOut: 'ARB',
    amount: '1000000',
    minAmountOut: '1',
    checkEvery: '1s',
  })

  const scheduler = await startService(top, automationService, { ...stack.automationEnv, AUTOMATION_SCHEDULER: 'true' })

  top.test('missed runs after downtime run once, and the next is an hour from now', async (t) => {
    const [run] = await eventually(
      'the missed run',
      async () => {
        const runs = await runsOf(hourly)
        return runs.some((r) => r.status !== 'running') ? runs : undefined
      },
      30_000,
    )
    t.equal(run.status, 'success', run.error)
    await new Promise((resolve) => setTimeout(resolve, 1500))
    t.equal((await runsOf(hourly)).length, 1, 'one run, not five')
    const automation = await get(hourly)
    t.ok(automation.nextRunAt > Date.now() + 58 * 60_000, 'the next run is an interval after the catch-up, not after the missed time')
  })

  top.test('three failed runs in a row make it failed, with the reason visible', async (t) => {
    const failed = await eventually(
      'the automation to fail',
      async () => {
        const automation = await get(refused, narrow)
        return automation.status === 'failed' ? automation : undefined
      },
      30_000,
    )
    t.match(failed.statusReason, /^3 runs in a row failed; the last: .*(not allowed|allowed tokens|USDC)/i)
    t.equal(failed.nextRunAt, null)
    const runs = await runsOf(refused, narrow)
    t.equal(runs.length, 3)
    t.ok(
      runs.every((r) => r.status === 'failed' && r.error && r.txHash === null),
      'each run failed before anything was sent',
    )
  })

  top.test('a limit order waits below its price and says what it saw; one at its price fills once and completes', async (t) => {
    const waited = await eventually(
      'a price check',
      async () => {
        const automation = await get(waiting)
        return automation.statusReason ? automation : undefined
      },
      30_000,
    )
    t.match(waited, { status: 'active', statusReason: /^waiting: the last quote gave [0-9.]+ ARB, below 1000000 ARB$/ })
    t.same(await runsOf(waiting), [])

    const filled = await eventually(
      'the fill',
      async () => {
        const automation = await get(filling)
        return automation.status === 'completed' ? automation : undefined
      },
      30_000,
    )
    t.match(filled, { runs: 1, statusReason: 'the limit order filled', nextRunAt: null })
    await new Promise((resolve) => setTimeout(resolve, 1500))
    const runs = await runsOf(filling)
    t.equal(runs.length, 1, 'filled once')
    t.match(runs[0], { status: 'success', txHash: /^0x[0-9a-f]{64}$/ })
  })

  top.test('/metrics counts the runs by how they ended, and trading their swaps as come over NATS', async (t) => {
    // the catch-up run and the fill succeeded; the narrow key's three runs failed
    t.same(await scrapeMetric(scheduler.url, 'ats_automation_runs_total'), { success: 2, failed: 3, skipped: 0 })
    t.same(
      await scrapeMetric(stack.url, 'ats_automation_runs_total'),
      { success: 0, failed: 0, skipped: 0 },
      'the routes-only replica recorded none',
    )
    const swaps = await scrapeMetric(stack.tradingUrl, 'ats_swaps_total')
    t.match(swaps, { 'success,nats': 2, 'refused,nats': 3, 'success,http': 0 })
  })

  top.test('a key buys for its bound wallet, or for a recipient an admin allowed it, only', async (t) => {
    const body = {
      walletAddress: wallet,
      type: 'recurring-buy',
      name: 'x',
      config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1', interval: '1h' },
    }
    const other = getAddress(devnet.accounts[9]!.address)
    const bound = await stack.createKey(other)
    const res = await call('/automations', { headers: keyHeaders(bound, other), body })
    t.equal(res.status, 403)
    t.equal(
      res.body.error,
      `recipient ${wallet} is not allowed for key ${bound}: the server wallet pays out only to its own wallet (${other}) or to a recipient an admin allowed for it (allowedRecipients in its spend policy)`,
    )
    // the gateway's wallet header is not what decides: admin's record of the key is
    const unbound = await stack.createKey()
    const claimed = await call('/automations', { headers: keyHeaders(unbound, wallet), body })
    t.equal(claimed.status, 403)
    t.match(claimed.body.error, /its bound wallet \(it has none\)/)
    const allowed = await stack.createKey(undefined, { allowedRecipients: [wallet.toLowerCase()] })
    const made = await call('/automations', {
      headers: keyHeaders(allowed),
      body: { ...body, config: { ...body.config, interval: '0 0 1 1 *' } },
    })
    t.equal(made.status, 201, JSON.stringify(made.body))
  })

  top.test('the database matches schema.prisma (the skipped run status included)', async (t) => {
    const schema = new URL('../prisma/schema.prisma', import.meta.url).pathname
    t.same(await compareSchemaWithDatabase(schema, stack.env.DATABASE_URL!, 'automation'), [])
  })
})
