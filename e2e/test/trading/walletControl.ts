import { gatewayService } from '@ats/gateway/service'
import { startService } from '@ats/service-kit/testing'
import OpenAI from 'openai'
import t from 'tap'
import { getAddress } from 'viem'
import { adminKey, eventually, startAgentFleet } from '../fleet.ts'

/**
 * The server wallet's kill switch through the gateway, with two trading and two automation
 * replicas: a pause stops swaps, agent swaps and automation runs everywhere within a second; a
 * resume restarts them.
 */
t.test("the server wallet's kill switch over trading and automation replicas", async (t) => {
  const fleet = await startAgentFleet(t, {
    automationEnv: { AUTOMATION_MIN_INTERVAL_MS: '1000', AUTOMATION_TICK_MS: '100' },
    replicas: { trading: 2, automation: 2 },
  })
  const { request, createKey, publicClient, serverWallet } = fleet
  // a second gateway in front of the second trading replica: each replica is asked through its own gateway
  const second = await startService(t, gatewayService, { ...fleet.gatewayEnv, TRADING_URL: fleet.tradings[1]!.url })
  const gateways = [fleet.gateway.url, second.url]
  const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
  const trader = await createKey('readwrite', 'trader')
  const asAdmin = (path: string, body?: unknown) => request(path, { method: body === undefined ? 'GET' : 'POST', key: adminKey, body })

  // a key whose policy refuses every swap it could make: 403 while the wallet runs, 423 once paused; it never spends
  const probeKey = (await asAdmin('/admin/keys', { tier: 'readwrite', label: 'probe', policy: { allowedTokens: ['DAI'] } })).body
    .key as string
  const probe = (gateway: string) =>
    fetch(`${gateway}/swap/execute`, {
      method: 'POST',
      headers: { authorization: `Bearer ${probeKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' }),
    })

  const agentSwap = async () => {
    const openai = new OpenAI({ apiKey: trader.key, baseURL: `${fleet.gateway.url}/v1`, maxRetries: 0 })
    const answer = await openai.chat.completions.create({
      model: 'ats-planner',
      messages: [{ role: 'user', content: 'swap 1 USDC for ARB' }],
    })
    return { call: (answer as any).agent.tool_calls[0], text: answer.choices[0]!.message.content ?? '' }
  }

  t.test('the kill switch is in the OpenAPI document and reads "running" before any pause', async (t) => {
    const { paths } = (await request('/openapi.json')).body
    for (const path of ['/admin/wallet', '/admin/wallet/pause', '/admin/wallet/resume']) t.ok(paths[path], path)
    t.same((await asAdmin('/admin/wallet')).body, { paused: false, reason: null, since: null, by: null })
    t.equal((await request('/admin/wallet', { key: trader.key })).status, 403, 'admin keys only')
  })

  t.test('pause: swaps on both replicas, an agent swap and an automation stop within a second; resume restarts them', async (t) => {
    for (const gateway of gateways) t.equal((await probe(gateway)).status, 403, 'before the pause, the probe is refused by its policy')
    const before = await agentSwap()
    t.match(
      before.call,
      { function: { name: 'swap' }, status: 'ok', output: { mode: 'executed', success: true } },
      'the agent swaps while the wallet runs',
    )

    const wallet = getAddress(fleet.devnet.accounts[6]!.address)
    // the run pays out to a wallet that is not the server's: an admin allows it for the key first
    const allowed = await request(`/admin/keys/${trader.id}/policy`, {
      method: 'PUT',
      key: adminKey,
      body: { policy: { allowedRecipients: [wallet] } },
    })
    t.equal(allowed.status, 200, JSON.stringify(allowed.body))
    const created = await request('/automations', {
      method: 'POST',
      key: trader.key,
      body: {
        walletAddress: wallet,
        type: 'recurring-buy',
        name: 'ARB every second',
        config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1s' },
      },
    })
    t.equal(created.status, 201, JSON.stringify(created.body))
    const id = created.body.automation.id as string
    const runsOf = async () => (await request(`/automations/${id}/runs?limit=100`, { key: trader.key })).body.runs as any[]
    await eventually('a run to succeed', async () => ((await runsOf()).some((r) => r.status === 'success') ? true : undefined), 30_000)

    const paused = await asAdmin('/admin/wallet/pause', { reason: 'drill' })
    const pausedAt = Date.now()
    t.match(paused.body, { paused: true, reason: 'drill', since: Number, by: String })

    for (const [i, gateway] of gateways.entries()) {
      let res = await probe(gateway)
      while (res.status !== 423 && Date.now() - pausedAt < 3000) res = await probe(gateway)
      const took = Date.now() - pausedAt
      t.equal(res.status, 423, `trading replica ${i + 1} refuses`)
      t.ok(took < 1000, `trading replica ${i + 1} refused ${took} ms after the pause answer`)
      t.match(
        ((await res.json()) as { error: string }).error,
        /^the server wallet is paused \(since .*, by key_.*\): drill; an admin resumes it with POST \/admin\/wallet\/resume$/,
      )
    }
    const direct = await fetch(`${fleet.gateway.url}/swap/execute`, {
      method: 'POST',
      headers: { authorization: `Bearer ${trader.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000' }),
    })
    t.equal(direct.status, 423, '/swap/execute of a key that may swap')

    const refused = await agentSwap()
    t.match(
      refused.call,
      { function: { name: 'swap' }, status: 'error', error: /the server wallet is paused .*: drill/ },
      "the agent's swap is refused",
    )
    t.match(refused.text, /server wallet is paused/, 'and the answer says why')

    // a run claimed just before the pause may still finish; after that nothing is sent
    await eventually(
      'runs under way to finish',
      async () => ((await runsOf()).some((r) => r.status === 'running') ? undefined : true),
      30_000,
    )
    const nonce = await nonceOf()
    const { runs: countAtPause } = (await request(`/automations/${id}`, { key: trader.key })).body.automation
    const skipped = await eventually(
      'three due runs to be skipped',
      async () => {
        const runs = (await runsOf()).filter((r) => r.scheduledFor > pausedAt + 1000)
        return runs.filter((r) => r.status === 'skipped').length >= 3 ? runs : undefined
      },
      30_000,
    )
    t.same(
      [...new Set(skipped.map((r) => r.status))],
      ['skipped'],
      'every run due a second after the pause is skipped, on whichever replica took it',
    )
    for (const run of skipped) t.match(run.error, /^skipped: the server wallet is paused \(since .*\): drill/)
    t.equal(await nonceOf(), nonce, 'no transaction from the server wallet')
    const held = (await request(`/automations/${id}`, { key: trader.key })).body.automation
    t.match(held, { status: 'active', runs: countAtPause }, 'skipped runs are neither runs nor failures')

    const resumed = await asAdmin('/admin/wallet/resume', {})
    const resumedAt = Date.now()
    t.match(resumed.body, { paused: false, reason: null })
    await eventually(
      'a run after the resume',
      async () => ((await runsOf()).some((r) => r.status === 'success' && r.scheduledFor > resumedAt) ? true : undefined),
      30_000,
    )
    for (const gateway of gateways) t.equal((await probe(gateway)).status, 403, 'the probe is back to its policy')
    const after = await agentSwap()
    t.match(after.call, { status: 'ok', output: { mode: 'executed', success: true } }, 'the agent swaps again')
    await request(`/automations/${id}`, { method: 'DELETE', key: trader.key })
  })
})
