import { erc20Abi } from '@ats/chain'
import OpenAI from 'openai'
import t from 'tap'
import { getAddress, type Address } from 'viem'
import { eventually, startAgentFleet } from './fleet.ts'

/** Automations through the gateway on the devnet: created, run on chain, paused, resumed, deleted. */
const fleet = await startAgentFleet(t, { automationEnv: { AUTOMATION_MIN_INTERVAL_MS: '2000', AUTOMATION_TICK_MS: '100' } })
const { request, createKey, devnet, publicClient } = fleet
const writer = await createKey('readwrite', 'automations')
const other = await createKey('readwrite', 'someone else')
const wallet = getAddress(devnet.accounts[6]!.address) as Address
const arb = getAddress(devnet.book.tokens.find((token) => token.symbol === 'ARB')!.address as Address)
const arbOf = (owner: Address) => publicClient.readContract({ address: arb, abi: erc20Abi, functionName: 'balanceOf', args: [owner] })
const as = (key: string) => ({ key })

t.test('a recurring buy runs on chain; pause stops it, resume restarts it, delete removes it', async (t) => {
  const before = await arbOf(wallet)
  const created = await request('/automations', {
    method: 'POST',
    ...as(writer.key),
    body: { walletAddress: wallet, type: 'recurring-buy', name: 'ARB every 2 s', config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '2s' } },
  })
  t.equal(created.status, 201, JSON.stringify(created.body))
  const { id } = created.body.automation
  t.match(created.body.automation, { id: /^aut_/, name: 'ARB every 2 s', type: 'recurring-buy', status: 'active', walletAddress: wallet, createdAt: Number })

  const runsOf = async () => (await request(`/automations/${id}/runs`, as(writer.key))).body.runs as any[]
  const twoRuns = await eventually('two runs to be mined', async () => {
    const runs = (await runsOf()).filter((r) => r.status === 'success')
    return runs.length >= 2 ? runs : undefined
  }, 30_000)
  for (const run of twoRuns) {
    const receipt = await publicClient.getTransactionReceipt({ hash: run.txHash })
    t.equal(receipt.status, 'success', `run ${run.id} mined`)
  }
  const grown = await arbOf(wallet)
  t.ok(grown > before, `the wallet's ARB grew: ${before} -> ${grown}`)

  const paused = await request(`/automations/${id}`, { method: 'PATCH', ...as(writer.key), body: { status: 'paused' } })
  t.match(paused.body.automation, { status: 'paused', nextRunAt: null })
  // a run claimed just before the pause may still finish; after that, nothing
  await new Promise((resolve) => setTimeout(resolve, 1500))
  const atPause = (await runsOf()).length
  await new Promise((resolve) => setTimeout(resolve, 4500))
  t.equal((await runsOf()).length, atPause, 'no runs while paused')

  const resumed = await request(`/automations/${id}`, { method: 'PATCH', ...as(writer.key), body: { status: 'active' } })
  t.equal(resumed.body.automation.status, 'active')
  await eventually('a run after resuming', async () => ((await runsOf()).filter((r) => r.status === 'success').length > atPause ? true : undefined), 30_000)

  const listed = await request(`/automations?wallet=${wallet}`, as(writer.key))
  t.same(listed.body.automations.map((a: any) => a.id), [id])
  t.ok(listed.body.automations[0].runs >= 3, 'runs counted')
  t.same((await request(`/automations?wallet=${wallet}`, as(other.key))).body.automations, [], "another key's list does not show it")
  t.equal((await request(`/automations/${id}`, { method: 'PATCH', ...as(other.key), body: { status: 'paused' } })).status, 404, 'another key gets 404')
  t.equal((await request(`/automations/${id}`, { method: 'DELETE', ...as(other.key) })).status, 404)

  const deleted = await request(`/automations/${id}`, { method: 'DELETE', ...as(writer.key) })
  t.same(deleted.body, { ok: true })
  t.equal((await request(`/automations/${id}`, as(writer.key))).status, 404)
  t.equal((await request(`/automations/${id}`, { method: 'DELETE', ...as(writer.key) })).status, 404, 'deleted once')
  t.same((await request(`/automations?wallet=${wallet}`, as(writer.key))).body.automations, [])
})

t.test('bad bodies each get a 400 {error} naming the problem', async (t) => {
  const body = (over: Record<string, unknown>, config: Record<string, unknown> = {}) => ({
    walletAddress: wallet,
    type: 'recurring-buy',
    name: 'x',
    ...over,
    config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1h', ...config },
  })
  const cases: Array<[string, unknown, RegExp]> = [
    ['no name', { walletAddress: wallet, type: 'recurring-buy', config: {} }, /Missing required params: name/],
    ['no config', { walletAddress: wallet, type: 'recurring-buy', name: 'x' }, /Missing required params: config/],
    ['a bad wallet', body({ walletAddress: '0x123' }), /body\/walletAddress must match pattern/],
    ['an unknown type', body({ type: 'moon-shot' }), /^type moon-shot is not supported; types: recurring-buy, limit-order$/],
    ['an unknown token', body({}, { tokenOut: 'DOGE' }), /^config.tokenOut DOGE is not a known token; known: /],
    ['a decimal amount', body({}, { amount: '1.5' }), /^config.amount must be a positive integer string in USDC base units/],
    ['a zero amount', body({}, { amount: '0' }), /^config.amount must be a positive integer string/],
    ['a bad interval', body({}, { interval: 'sometimes' }), /^config.interval "sometimes" is neither an interval/],
    ['a too short interval', body({}, { interval: '1s' }), /^config.interval 1s is shorter than the minimum of 2 s$/],
    ['the same token twice', body({}, { tokenOut: 'USDC' }), /^config.tokenOut must differ from tokenIn$/],
    ['an endAt in the past', body({}, { endAt: 1 }), /^config.endAt must be a time in the future/],
    ['an unknown field', body({}, { every: '1h' }), /^config.every is not a field of a recurring-buy/],
    ['a limit order without its price', body({ type: 'limit-order' }, { interval: undefined }), /config.minAmountOut must be a positive integer string/],
  ]
  for (const [name, payload, message] of cases) {
    const res = await request('/automations', { method: 'POST', ...as(writer.key), body: payload })
    t.equal(res.status, 400, name)
    t.match(res.body.error, message, name)
  }
  t.equal((await request('/automations', as(writer.key))).status, 400, 'a list needs its wallet')
  t.match((await request('/automations?wallet=nope', as(writer.key))).body.error, /querystring\/wallet must match pattern/)
  const patch = await request('/automations/aut_x', { method: 'PATCH', ...as(writer.key), body: { status: 'sleeping' } })
  t.equal(patch.status, 400)
  t.match(patch.body.error, /body\/status must be equal to one of the allowed values: active, paused, completed, failed/)
  t.equal((await request('/automations/aut_unknown', { method: 'PATCH', ...as(writer.key), body: { status: 'paused' } })).status, 404)
})

t.test("the agent's \"buy 1 USDC of ARB every hour\" creates an automation that the list shows", async (t) => {
  const bound = getAddress(devnet.accounts[7]!.address) as Address
  const created = await request('/admin/keys', { method: 'POST', key: (await import('./fleet.ts')).adminKey, body: { tier: 'readwrite', label: 'agent buyer', wallet: bound } })
  t.equal(created.status, 201)
  const openai = new OpenAI({ apiKey: created.body.key, baseURL: `${fleet.gateway.url}/v1`, maxRetries: 0 })
  const answer = await openai.chat.completions.create({ model: 'ats-planner', messages: [{ role: 'user', content: 'buy 1 USDC of ARB every hour' }] })
  const [call] = (answer as any).agent.tool_calls
  t.match(call, { function: { name: 'create_automation' }, status: 'ok' })
  const listed = await request(`/automations?wallet=${bound}`, { key: created.body.key })
  t.equal(listed.body.automations.length, 1)
  t.match(listed.body.automations[0], { type: 'recurring-buy', status: 'active', walletAddress: bound, config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1h' } })
  t.equal(listed.body.automations[0].id, call.output.automation.id)
  t.match(answer.choices[0]!.message.content, /ARB/)
})
