import { erc20Abi } from '@ats/chain'
import OpenAI from 'openai'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { getAddress, type Address } from 'viem'
import { adminKey, eventually, startAgentFleet } from '../fleet.ts'

/**
 * Automations through the gateway on the devnet: created, run on chain, paused, resumed, deleted;
 * and runs over a key's approvalAboveUsd, which wait for a person. One fleet for the file: each
 * test has keys and wallets of its own and deletes or leaves idle (hourly, yearly) what it made.
 */
const maxPerKey = 3
t.test('automations created, run on chain, paused, resumed and deleted', async (t) => {
  const fleet = await startAgentFleet(t, {
    automationEnv: {
      AUTOMATION_MIN_INTERVAL_MS: '2000',
      AUTOMATION_TICK_MS: '100',
      AUTOMATION_MAX_PER_KEY: String(maxPerKey),
      APPROVAL_POLL_MS: '200',
    },
  })

  // runs waiting for approval: first, so that its setup runs before any test
  {
    /** An automation whose swaps are over the key's approvalAboveUsd: each run waits for a person, through the gateway. */
    const { request, devnet, publicClient } = fleet
    const wallet = getAddress(privateKeyToAccount(generatePrivateKey()).address)
    const created = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label: 'approvals', wallet } })
    if (created.status !== 201) throw new Error(JSON.stringify(created.body))
    const { key, id: keyId } = created.body as { key: string; id: string }
    const policy = await request(`/admin/keys/${keyId}/policy`, {
      method: 'PUT',
      key: adminKey,
      body: { policy: { approvalAboveUsd: 10 } },
    })
    if (policy.status !== 200) throw new Error(JSON.stringify(policy.body))
    const arb = getAddress(devnet.book.tokens.find((token) => token.symbol === 'ARB')!.address as Address)
    const arbOf = () => publicClient.readContract({ address: arb, abi: erc20Abi, functionName: 'balanceOf', args: [wallet] })

    t.test('an automation run over approvalAboveUsd waits; approved it swaps once, rejected it ends without a swap', async (t) => {
      // 20 USDC every 2 s: worth $20, over the key's $10
      const made = await request('/automations', {
        method: 'POST',
        key,
        body: {
          walletAddress: wallet,
          type: 'recurring-buy',
          name: 'big buys',
          config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '20000000', interval: '2s' },
        },
      })
      t.equal(made.status, 201, JSON.stringify(made.body))
      const { id } = made.body.automation
      const runsOf = async () => (await request(`/automations/${id}/runs`, { key })).body.runs as any[]
      const waiting = () =>
        eventually(
          'a run waiting for approval',
          async () => {
            const [run] = await runsOf()
            return run?.status === 'awaiting_approval' ? run : undefined
          },
          30_000,
        )
      const ended = (runId: string) =>
        eventually(
          `run ${runId} to end`,
          async () => {
            const run = (await runsOf()).find((r) => r.id === runId)
            return run.status === 'awaiting_approval' ? undefined : run
          },
          30_000,
        )

      const first = await waiting()
      t.match(first, { status: 'awaiting_approval', txHash: null, approval: { id: /^apr_/, url: `/approvals/${first.approval.id}` } })
      const shown = await request(first.approval.url, { key })
      t.equal(shown.status, 200, 'the run says where to approve, and the gateway answers there')
      t.match(shown.body, {
        id: first.approval.id,
        status: 'pending',
        swap: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '20000000' },
        requestedBy: { keyId, automationRunId: first.id },
      })
      t.equal(await arbOf(), 0n, 'nothing bought before the approval')

      // approved twice at once (by an admin key: the automation's own key may not approve its swaps): one swap
      const approvals = await Promise.all(
        [0, 1].map(() => request(`/approvals/${first.approval.id}/approve`, { method: 'POST', key: adminKey })),
      )
      for (const approved of approvals) t.equal(approved.status, 200, JSON.stringify(approved.body))
      const succeeded = await ended(first.id)
      t.match(succeeded, { status: 'success', txHash: /^0x[0-9a-f]{64}$/, approval: { id: first.approval.id } })
      t.same(
        approvals.map((a) => a.body.result?.hash),
        [succeeded.txHash, succeeded.txHash],
        'both approvals answer the one swap the run recorded',
      )
      t.equal((await publicClient.getTransactionReceipt({ hash: succeeded.txHash })).status, 'success')
      t.equal(await arbOf(), BigInt(succeeded.amountOut), 'the wallet got what the one swap bought')
      t.match((await request(`/automations/${id}`, { key })).body.automation, { runs: 1 })

      const second = await waiting()
      t.not(second.id, first.id)
      const rejected = await request(`/approvals/${second.approval.id}/reject`, {
        method: 'POST',
        key,
        body: { reason: 'enough for today' },
      })
      t.equal(rejected.status, 200, JSON.stringify(rejected.body))
      const skipped = await ended(second.id)
      t.match(skipped, {
        status: 'skipped',
        txHash: null,
        amountOut: null,
        error: `not swapped: approval ${second.approval.id} was rejected by ${keyId}: enough for today`,
      })
      t.equal(await arbOf(), BigInt(succeeded.amountOut), 'nothing more bought')
      t.match((await request(`/automations/${id}`, { key })).body.automation, { runs: 1 })

      const third = await waiting()
      t.same((await request(`/automations/${id}`, { method: 'DELETE', key })).body, { ok: true })
      t.match(
        (await request(`/approvals/${third.approval.id}`, { key })).body,
        { status: 'rejected' },
        "deleting the automation withdrew its waiting run's approval",
      )
    })
  }

  // automations
  {
    const { request, createKey, devnet, publicClient } = fleet
    const writer = await createKey('readwrite', 'automations')
    const other = await createKey('readwrite', 'someone else')
    const wallet = getAddress(devnet.accounts[6]!.address) as Address
    const setPolicy = (keyId: string, policy: Record<string, unknown>) =>
      request(`/admin/keys/${keyId}/policy`, { method: 'PUT', key: adminKey, body: { policy } })
    /** A readwrite key bound to a wallet of its own (a fresh address): its automations may buy for that wallet. */
    const boundKey = async (label: string) => {
      const bound = getAddress(privateKeyToAccount(generatePrivateKey()).address)
      const created = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier: 'readwrite', label, wallet: bound } })
      if (created.status !== 201) throw new Error(JSON.stringify(created.body))
      return { key: created.body.key as string, wallet: bound }
    }
    await setPolicy(writer.id, { allowedRecipients: [wallet] })
    const arb = getAddress(devnet.book.tokens.find((token) => token.symbol === 'ARB')!.address as Address)
    const arbOf = (owner: Address) => publicClient.readContract({ address: arb, abi: erc20Abi, functionName: 'balanceOf', args: [owner] })
    const as = (key: string) => ({ key })

    t.test('a recurring buy runs on chain; pause stops it, resume restarts it, delete removes it', async (t) => {
      const before = await arbOf(wallet)
      const created = await request('/automations', {
        method: 'POST',
        ...as(writer.key),
        body: {
          walletAddress: wallet,
          type: 'recurring-buy',
          name: 'ARB every 2 s',
          config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '2s' },
        },
      })
      t.equal(created.status, 201, JSON.stringify(created.body))
      const { id } = created.body.automation
      t.match(created.body.automation, {
        id: /^aut_/,
        name: 'ARB every 2 s',
        type: 'recurring-buy',
        status: 'active',
        walletAddress: wallet,
        createdAt: Number,
      })

      const runsOf = async () => (await request(`/automations/${id}/runs`, as(writer.key))).body.runs as any[]
      const twoRuns = await eventually(
        'two runs to be mined',
        async () => {
          const runs = (await runsOf()).filter((r) => r.status === 'success')
          return runs.length >= 2 ? runs : undefined
        },
        30_000,
      )
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
      await eventually(
        'a run after resuming',
        async () => ((await runsOf()).filter((r) => r.status === 'success').length > atPause ? true : undefined),
        30_000,
      )

      const listed = await request(`/automations?wallet=${wallet}`, as(writer.key))
      t.same(
        listed.body.automations.map((a: any) => a.id),
        [id],
      )
      t.ok(listed.body.automations[0].runs >= 3, 'runs counted')
      t.same((await request(`/automations?wallet=${wallet}`, as(other.key))).body.automations, [], "another key's list does not show it")
      t.equal(
        (await request(`/automations/${id}`, { method: 'PATCH', ...as(other.key), body: { status: 'paused' } })).status,
        404,
        'another key gets 404',
      )
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
        [
          'an unknown type',
          body({ type: 'moon-shot' }),
          /^type moon-shot is not supported; types: recurring-buy, limit-order, twap, stop-loss, take-profit, trailing-stop$/,
        ],
        ['an unknown token', body({}, { tokenOut: 'DOGE' }), /^config.tokenOut DOGE is not a known token; known: /],
        ['a decimal amount', body({}, { amount: '1.5' }), /^config.amount must be a positive integer string in USDC base units/],
        ['a zero amount', body({}, { amount: '0' }), /^config.amount must be a positive integer string/],
        ['a bad interval', body({}, { interval: 'sometimes' }), /^config.interval "sometimes" is neither an interval/],
        ['a too short interval', body({}, { interval: '1s' }), /^config.interval 1s is shorter than the minimum of 2 s$/],
        ['the same token twice', body({}, { tokenOut: 'USDC' }), /^config.tokenOut must differ from tokenIn$/],
        ['an endAt in the past', body({}, { endAt: 1 }), /^config.endAt must be a time in the future/],
        ['an unknown field', body({}, { every: '1h' }), /^config.every is not a field of a recurring-buy/],
        [
          'a limit order without its price',
          body({ type: 'limit-order' }, { interval: undefined }),
          /config.minAmountOut must be a positive integer string/,
        ],
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

    t.test('the agent\'s "buy 1 USDC of ARB every hour" creates an automation that the list shows', async (t) => {
      const bound = getAddress(devnet.accounts[7]!.address) as Address
      const created = await request('/admin/keys', {
        method: 'POST',
        key: (await import('../fleet.ts')).adminKey,
        body: { tier: 'readwrite', label: 'agent buyer', wallet: bound },
      })
      t.equal(created.status, 201)
      const openai = new OpenAI({ apiKey: created.body.key, baseURL: `${fleet.gateway.url}/v1`, maxRetries: 0 })
      const answer = await openai.chat.completions.create({
        model: 'ats-planner',
        messages: [{ role: 'user', content: 'buy 1 USDC of ARB every hour' }],
      })
      const [call] = (answer as any).agent.tool_calls
      t.match(call, { function: { name: 'create_automation' }, status: 'ok' })
      const listed = await request(`/automations?wallet=${bound}`, { key: created.body.key })
      t.equal(listed.body.automations.length, 1)
      t.match(listed.body.automations[0], {
        type: 'recurring-buy',
        status: 'active',
        walletAddress: bound,
        config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1h' },
      })
      t.equal(listed.body.automations[0].id, call.output.automation.id)
      t.match(answer.choices[0]!.message.content, /ARB/)
    })

    t.test(
      'a fresh key cannot make the server wallet buy for an address nobody allowed; after an admin allows it, its runs count toward its daily cap',
      async (t) => {
        const fresh = await createKey('readwrite', 'fresh, no policy')
        const stranger = getAddress(privateKeyToAccount(generatePrivateKey()).address)
        const body = {
          walletAddress: stranger,
          type: 'recurring-buy',
          name: 'for someone',
          config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '2s' },
        }
        const refused = await request('/automations', { method: 'POST', key: fresh.key, body })
        t.equal(refused.status, 403, 'refused at creation')
        t.equal(
          refused.body.error,
          `recipient ${stranger} is not allowed for key ${fresh.id}: the server wallet pays out only to its bound wallet (it has none) or to a recipient an admin allowed for it (allowedRecipients in its spend policy)`,
        )
        t.same((await request(`/automations?wallet=${stranger}`, { key: fresh.key })).body.automations, [], 'nothing stored')

        // an admin allows the recipient, with a daily cap of $2.50: two runs of 1 USDC, the third refused
        const allowed = await setPolicy(fresh.id, { maxUsdPerDay: 2.5, allowedRecipients: [stranger] })
        t.match(allowed.body.policy, { maxUsdPerDay: 2.5, allowedRecipients: [stranger] })
        const created = await request('/automations', { method: 'POST', key: fresh.key, body })
        t.equal(created.status, 201, JSON.stringify(created.body))
        const { id } = created.body.automation
        const runsOf = async () => ((await request(`/automations/${id}/runs?limit=100`, { key: fresh.key })).body.runs as any[]).reverse()
        const capped = await eventually(
          'a run refused by the daily cap',
          async () => {
            const runs = await runsOf()
            return runs.some((r) => r.status === 'failed') ? runs : undefined
          },
          60_000,
        )
        const succeeded = capped.filter((r) => r.status === 'success')
        t.equal(succeeded.length, 2, 'two runs of $1 fit in $2.50')
        t.match(
          capped.find((r) => r.status === 'failed').error,
          new RegExp(`^refused by the spend policy of key ${fresh.id}: .*over its limit of \\$2\\.50 per day`),
        )
        const bought = succeeded.reduce((sum, r) => sum + BigInt(r.amountOut), 0n)
        t.equal(await arbOf(stranger), bought, 'the allowed recipient got what the runs bought')

        // the allowance withdrawn: trading refuses the runs of the automation made while it held
        t.equal((await request(`/automations/${id}`, { method: 'PATCH', key: fresh.key, body: { status: 'paused' } })).status, 200)
        t.equal((await setPolicy(fresh.id, { maxUsdPerDay: 100 })).status, 200)
        t.equal((await request(`/automations/${id}`, { method: 'PATCH', key: fresh.key, body: { status: 'active' } })).status, 200)
        const withdrawn = await eventually(
          'a run refused for its recipient',
          async () => (await runsOf()).find((r) => /is not allowed for key/.test(r.error ?? '')),
          30_000,
        )
        t.match(withdrawn, {
          status: 'failed',
          txHash: null,
          error: new RegExp(`^recipient ${stranger} is not allowed for key ${fresh.id}`),
        })
        t.equal(await arbOf(stranger), bought, 'nothing more was sent to it')
        await request(`/automations/${id}`, { method: 'DELETE', key: fresh.key })
      },
    )

    t.test(`one key has at most AUTOMATION_MAX_PER_KEY (${maxPerKey}) active or paused automations: 409 past it`, async (t) => {
      const owner = await boundKey('many automations')
      const yearly = {
        walletAddress: owner.wallet,
        type: 'recurring-buy',
        config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '0 0 1 1 *' },
      }
      const create = (name: string) => request('/automations', { method: 'POST', key: owner.key, body: { ...yearly, name } })
      const patch = (id: string, status: string) => request(`/automations/${id}`, { method: 'PATCH', key: owner.key, body: { status } })
      const ids: string[] = []
      for (let i = 0; i < maxPerKey; i++) {
        const created = await create(`yearly ${i}`)
        t.equal(created.status, 201, JSON.stringify(created.body))
        ids.push(created.body.automation.id)
      }
      t.equal((await patch(ids[0]!, 'paused')).status, 200)
      const over = await create('one too many')
      t.equal(over.status, 409, 'a paused one still counts')
      t.equal(
        over.body.error,
        `this key has ${maxPerKey} active or paused automations, its limit (AUTOMATION_MAX_PER_KEY = ${maxPerKey}): delete one, or set one completed, first`,
      )

      t.equal((await patch(ids[0]!, 'completed')).status, 200)
      const replaced = await create('in place of a completed one')
      t.equal(replaced.status, 201, 'a completed one does not count')
      const reopened = await patch(ids[0]!, 'active')
      t.equal(reopened.status, 409, 'nor can it come back past the limit')
      t.match(reopened.body.error, /its limit \(AUTOMATION_MAX_PER_KEY = 3\)/)
      t.equal((await request(`/automations/${ids[1]}`, { method: 'DELETE', key: owner.key })).status, 200)
      t.equal((await patch(ids[0]!, 'active')).status, 200, 'a deleted one frees its place')
      t.equal((await create('one too many again')).status, 409)
    })

    t.test('pause then resume keeps the schedule: the next run stays at its time, not at once', async (t) => {
      const owner = await boundKey('hourly')
      const created = await request('/automations', {
        method: 'POST',
        key: owner.key,
        body: {
          walletAddress: owner.wallet,
          type: 'recurring-buy',
          name: 'ARB hourly',
          config: { tokenIn: 'USDC', tokenOut: 'ARB', amount: '1000000', interval: '1h' },
        },
      })
      t.equal(created.status, 201, JSON.stringify(created.body))
      const { id } = created.body.automation
      const ran = await eventually(
        'the first run',
        async () => {
          const { automation } = (await request(`/automations/${id}`, { key: owner.key })).body
          return automation.runs === 1 ? automation : undefined
        },
        30_000,
      )
      t.ok(ran.nextRunAt > Date.now() + 59 * 60_000, 'the next run is an hour on')
      t.match((await request(`/automations/${id}`, { method: 'PATCH', key: owner.key, body: { status: 'paused' } })).body.automation, {
        status: 'paused',
        nextRunAt: null,
      })
      const resumed = (await request(`/automations/${id}`, { method: 'PATCH', key: owner.key, body: { status: 'active' } })).body.automation
      t.match(resumed, { status: 'active', runs: 1 })
      t.equal(resumed.nextRunAt, ran.nextRunAt, 'resumed at the time the schedule had, not due at once')
      const runs = (await request(`/automations/${id}/runs`, { key: owner.key })).body.runs
      t.equal(runs.length, 1, 'no run made by the resume')
    })
  }
})
