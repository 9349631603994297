import Anthropic from '@anthropic-ai/sdk'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { Webhook } from 'standardwebhooks'
import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { adminKey, eventually, startAgentFleet, startReceiver } from '../fleet.ts'

/**
 * An agent job through the gateway: a swap over the spend policy's approvalAboveUsd makes the job
 * wait (awaiting_approval: GET job, its event stream, /v1 answers say so and where a person
 * decides); approved by someone other than the requester it swaps once and completes, rejected it
 * completes saying it did not swap. The key that asked cannot approve its own swap, over HTTP or MCP.
 */
t.test('a swap over the approval threshold: the agent job waits for a person', async (t) => {
  const fleet = await startAgentFleet(t, {
    agentEnv: { APPROVAL_POLL_MS: '200' },
    // webhooks to a local receiver (development settings)
    adminEnv: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_ADDRESSES: 'true' },
  })
  const { request, pay, publicClient, serverWallet, gateway } = fleet
  const payer = fleet.payer.address
  const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
  const paid = async (path: string, init: { method?: string; body?: unknown } = {}) =>
    request(path, { ...init, headers: { 'x-payment': await pay() } })
  const prompt = 'swap 50 USDC for WETH'

  /** A readwrite key whose spend policy holds swaps over $10 for a person's approval. */
  const approvalKey = () => fleet.createKey('readwrite', 'agent approvals', { approvalAboveUsd: 10 })
  const executionsOf = async (key: string) => (await request('/swap/executions', { key })).body.executions as unknown[]

  const paidJob = async (jobId: string, until: (status: string) => boolean) =>
    eventually(
      `job ${jobId}`,
      async () => {
        const job = (await paid(`/agent/job/${jobId}`)).body
        return until(job.status) ? job : undefined
      },
      30_000,
    )

  t.before(async () => {
    const allow = await request(`/admin/agent-payers/${payer}`, {
      method: 'PUT',
      key: adminKey,
      body: { label: 'approvals', policy: { maxUsdPerSwap: 100, approvalAboveUsd: 10 } },
    })
    if (allow.status !== 200) throw new Error(JSON.stringify(allow.body))
    // under the threshold, so not held: it sets the server wallet's router allowance, so that each swap later is one transaction
    const warm = await paid('/agent/prompt', { method: 'POST', body: { prompt: 'swap 1 USDC for WETH' } })
    const job = await paidJob(warm.body.jobId, (status) => ['complete', 'failed', 'cancelled'].includes(status))
    if (job.result?.transactions?.[0]?.success !== true) throw new Error(`warm-up swap: ${JSON.stringify(job)}`)
  })

  t.test(
    'a paid job waits: GET job and its stream show the approval; approved through the gateway, it swaps once and completes',
    async (t) => {
      const accepted = await paid('/agent/prompt', { method: 'POST', body: { prompt } })
      t.equal(accepted.status, 202)
      const { jobId } = accepted.body
      const waiting = await paidJob(jobId, (status) => status === 'awaiting_approval')
      t.match(waiting, {
        status: 'awaiting_approval',
        approval: { id: /^apr_/, status: 'pending', requestedBy: { jobId }, policy: { approvalAboveUsd: 10 } },
        notice: /^Approval needed: swap 50 USDC for WETH \(worth \$50\.00/,
      })

      // the stream shows the wait, with the approval, and stays open
      const controller = new AbortController()
      const stream = await fetch(`${gateway.url}/agent/job/${jobId}/events`, {
        headers: { 'x-payment': await pay() },
        signal: controller.signal,
      })
      t.equal(stream.status, 200)
      const reader = stream.body!.getReader()
      let text = ''
      while (!text.includes('"awaiting_approval"')) {
        const { value, done } = await reader.read()
        if (done) break
        text += new TextDecoder().decode(value)
      }
      const frame = text.split('\n\n').find((f) => f.includes('"awaiting_approval"'))!
      t.match(frame, /^id: \d+\nevent: status\ndata: /)
      t.match(JSON.parse(frame.slice(frame.indexOf('data: ') + 6)), {
        status: 'awaiting_approval',
        approval: { id: waiting.approval.id },
        notice: waiting.notice,
      })
      controller.abort()

      // a key bound to the paying wallet decides the payer's approvals
      const bound = await request('/admin/keys', {
        method: 'POST',
        key: adminKey,
        body: { tier: 'readwrite', label: 'payer', wallet: payer },
      })
      t.equal(bound.status, 201, JSON.stringify(bound.body))
      const before = await nonceOf()
      const approved = await request(`/approvals/${waiting.approval.id}/approve`, { method: 'POST', key: bound.body.key })
      t.equal(approved.status, 200, JSON.stringify(approved.body))
      t.equal(approved.body.decidedBy, bound.body.id)
      const done = await paidJob(jobId, (status) => ['complete', 'failed', 'cancelled'].includes(status))
      t.equal(done.status, 'complete', done.error)
      t.match(done.result.text, /^Swapped 50 USDC for [0-9.]+ WETH/)
      t.match(done.result.transactions, [{ status: 'sent', success: true, amountIn: '50000000' }])
      t.equal(done.result.transactions.length, 1)
      t.equal(await nonceOf(), before + 1, 'one transaction: the swap, mined once')
    },
  )

  t.test('a /v1 response says approval is needed and where; rejected, the job completes without a swap', async (t) => {
    const { key } = await approvalKey()
    const openai = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 })
    const response = await openai.responses.create({ model: 'ats-planner', input: prompt })
    t.equal(response.status, 'in_progress', 'answered at once while the job waits')
    const ats = (response as unknown as { ats: { jobId: string; status: string; approval: { id: string } } }).ats
    t.match(ats, { status: 'awaiting_approval', approval: { id: /^apr_/, status: 'pending' } })
    t.match(
      response.output_text,
      new RegExp(
        `^Approval needed: swap 50 USDC for WETH \\(worth \\$50\\.00, over the \\$10\\.00 approval threshold of key key_\\S+\\)\\. A person decides it \\(an admin key or a key the policy names in approvers\\): approve with POST /approvals/${ats.approval.id}/approve, or reject with POST /approvals/${ats.approval.id}/reject \\(or open /console/#/approvals/${ats.approval.id} in the web console\\), within 15 minutes\\. This answer's job goes on after the decision: GET /v1/responses/${response.id}$`,
      ),
    )
    const listed = await request('/portfolio/jobs', { key })
    t.match(listed.body.jobs[0], { id: ats.jobId, status: 'awaiting_approval', approval: { id: ats.approval.id } })

    const before = await nonceOf()
    const rejected = await request(`/approvals/${ats.approval.id}/reject`, { method: 'POST', key, body: { reason: 'not now' } })
    t.equal(rejected.status, 200, JSON.stringify(rejected.body))
    const done = await eventually('the response to complete', async () => {
      const current = await openai.responses.retrieve(response.id)
      return current.status === 'completed' ? current : undefined
    })
    t.match(done.output_text, new RegExp(`^I did not swap 50 USDC for WETH: approval ${ats.approval.id} was rejected by key_\\S+: not now`))
    t.same(await executionsOf(key), [], 'no execution')
    t.equal(await nonceOf(), before, 'nothing was sent')
  })

  t.test('the job.awaiting_approval webhook carries the approval, signed, to the key that made the job', async (t) => {
    const receiver = await startReceiver(t)
    const { key } = await approvalKey()
    const url = receiver.url('/hook')
    const hook = await request('/webhooks', { method: 'POST', key, body: { url, events: ['job.awaiting_approval'] } })
    t.equal(hook.status, 201, JSON.stringify(hook.body))

    const answer = await request('/v1/responses', { method: 'POST', key, body: { model: 'ats-planner', input: prompt } })
    t.equal(answer.body.status, 'in_progress')
    const got = await eventually('the job.awaiting_approval delivery', async () => receiver.received[0], 30_000)
    const event = new Webhook(hook.body.secret).verify(got.body, got.headers as Record<string, string>) as {
      type: string
      data: Record<string, any>
    }
    t.equal(event.type, 'job.awaiting_approval')
    t.match(event.data, {
      jobId: answer.body.ats.jobId,
      status: 'awaiting_approval',
      prompt,
      approval: { id: answer.body.ats.approval.id, status: 'pending' },
      notice: /^Approval needed/,
    })
    t.equal((await request(`/approvals/${answer.body.ats.approval.id}/reject`, { method: 'POST', key })).status, 200)
  })

  t.test('a chat completion answers at once with the approval in `ats`; approved by an admin key, the job swaps', async (t) => {
    const { key } = await approvalKey()
    const openai = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 })
    const completion = await openai.chat.completions.create({ model: 'ats-planner', messages: [{ role: 'user', content: prompt }] })
    t.equal(completion.choices[0]!.finish_reason, 'stop')
    const ats = (completion as unknown as { ats: { jobId: string; approval: { id: string; links: { approve: string } } } }).ats
    t.match(ats, { status: 'awaiting_approval', approval: { id: /^apr_/ } })
    t.match(
      completion.choices[0]!.message.content,
      new RegExp(
        `^Approval needed: swap 50 USDC for WETH .*approve with POST /approvals/${ats.approval.id}/approve.*job ${ats.jobId}, in GET /portfolio/jobs$`,
      ),
    )

    t.equal((await request(ats.approval.links.approve, { method: 'POST', key })).status, 403, 'not by the key that asked')
    t.equal((await request(ats.approval.links.approve, { method: 'POST', key: adminKey })).status, 200)
    const job = await eventually('the job to complete', async () => {
      const found = (
        (await request('/portfolio/jobs', { key })).body.jobs as Array<{ id: string; status: string; result?: { text: string } }>
      ).find((j) => j.id === ats.jobId)
      return found?.status === 'complete' ? found : undefined
    })
    t.match(job.result!.text, /^Swapped 50 USDC for [0-9.]+ WETH/)
    t.equal((await executionsOf(key)).length, 1, 'one execution')
  })

  t.test("Anthropic's Messages pause the turn, and a streamed chat completion ends with the notice; both jobs wait on", async (t) => {
    const { key } = await approvalKey()
    const anthropic = new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0 })
    const message = await anthropic.messages.create({
      model: 'ats-planner',
      max_tokens: 1024,
      messages: [{ role: 'user', content: prompt }],
    })
    t.equal(message.stop_reason, 'pause_turn')
    const block = message.content[0]!
    t.match(
      block.type === 'text' ? block.text : '',
      /^Approval needed: swap 50 USDC for WETH .*approve with POST \/approvals\/apr_\S+\/approve/,
    )
    const paused = (message as unknown as { ats: { jobId: string; approval: { id: string } } }).ats
    t.match(paused, { status: 'awaiting_approval', approval: { status: 'pending' } })

    const openai = new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0 })
    let text = ''
    let last: { finish_reason?: string | null; ats?: { approval: { id: string } } } = {}
    for await (const chunk of await openai.chat.completions.create({
      model: 'ats-planner',
      stream: true,
      messages: [{ role: 'user', content: prompt }],
    })) {
      text += chunk.choices[0]?.delta.content ?? ''
      if (chunk.choices[0]?.finish_reason)
        last = { finish_reason: chunk.choices[0].finish_reason, ats: (chunk as unknown as typeof last).ats }
    }
    t.equal(last.finish_reason, 'stop')
    t.match(text, new RegExp(`^Approval needed: swap 50 USDC for WETH .*reject with POST /approvals/${last.ats!.approval.id}/reject`))

    const jobs = (await request('/portfolio/jobs', { key })).body.jobs as Array<{ status: string }>
    t.same(
      jobs.map((j) => j.status),
      ['awaiting_approval', 'awaiting_approval'],
      'neither job was cancelled by its answer',
    )
    for (const id of [paused.approval.id, last.ats!.approval.id])
      t.equal((await request(`/approvals/${id}/reject`, { method: 'POST', key })).status, 200)
  })

  /** An MCP client of the gateway with `key`; `data` calls a tool and answers its structured result (an error result throws). */
  async function mcpClient(t: Test, key: string) {
    const client = new Client({ name: 'approvals-test', version: '1.0.0' })
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }),
    )
    t.teardown(() => client.close())
    await client.listTools() // the client then checks each result against the tool's outputSchema
    const call = async (name: string, args: Record<string, unknown> = {}) =>
      (await client.callTool({ name, arguments: args })) as CallToolResult
    const data = async (name: string, args: Record<string, unknown> = {}) => {
      const result = await call(name, args)
      if (result.isError) throw new Error(`${name}: ${JSON.stringify(result.content)}`)
      return result.structuredContent as any
    }
    return { client, call, data }
  }

  t.test('over MCP: agent_prompt answers the wait at once; approve_swap of the same key is refused, an approver decides', async (t) => {
    const approver = await fleet.createKey('readwrite', 'approver')
    const { key } = await fleet.createKey('readwrite', 'mcp approvals', { approvalAboveUsd: 10, approvers: [approver.id] })
    const { call, data } = await mcpClient(t, key)
    const decider = await mcpClient(t, approver.key)

    const answer = await data('agent_prompt', { prompt })
    t.equal(answer.status, 'in_progress')
    t.match(answer.output[0].content[0].text, /^Approval needed: swap 50 USDC for WETH .*GET \/v1\/responses\/resp_/)
    const held = await data('execute_swap', { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000' })
    t.match(held, { status: 'awaiting_approval', approval: { status: 'pending' } })
    const listed = await data('list_approvals', {})
    t.same(listed.approvals.map((a: { id: string }) => a.id).sort(), [answer.ats.approval.id, held.approval.id].sort())

    const tools = await decider.client.listTools()
    for (const name of ['agent_prompt', 'approve_swap', 'execute_swap']) {
      const description = tools.tools.find((tool) => tool.name === name)?.description ?? ''
      t.notMatch(description, /approve_swap, reject_swap|approve it yourself/, `${name} does not invite the model to approve`)
    }
    const own = await call('approve_swap', { id: held.approval.id })
    t.equal(own.isError, true, 'the key that asked cannot approve its own swap')
    t.match(JSON.stringify(own.content), /cannot approve it itself/)
    t.equal((await data('get_approval', { id: held.approval.id })).status, 'pending')

    t.match(await data('reject_swap', { id: answer.ats.approval.id, reason: 'no' }), { status: 'rejected' })
    const approved = await decider.data('approve_swap', { id: held.approval.id })
    t.match(approved, { status: 'approved', decidedBy: approver.id, result: { success: true } })
    const done = await eventually('the agent answer to complete', async () => {
      const current = await data('agent_get_job', { id: answer.id })
      return current.status === 'completed' ? current : undefined
    })
    t.match(done.output[0].content[0].text, /^I did not swap 50 USDC for WETH: approval \S+ was rejected by key_\S+: no/)
  })
})
