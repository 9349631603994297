import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { x402Client } from '@x402/core/client'
import type { PaymentRequired } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier'
import t from 'tap'
import { getAddress } from 'viem'
import { adminKey, eventually, startAgentFleet } from '../fleet.ts'

/**
 * The agent's tools over MCP without an API key, paid per call with x402 as the MCP transport of
 * x402 specifies (transports-v2/mcp.md): an unpaid call answers the PaymentRequired as a tool
 * error; the client's x402 library (@x402/core with the exact EVM scheme) signs a real EIP-3009
 * authorization for it, sent in `_meta["x402/payment"]`; the paid prompt runs its job, the tool
 * answers the job's answer with `_meta["x402/payment-response"]`, and the payment is settled on
 * the devnet once, however often the same payment is sent again.
 */
t.test("the agent's tools over MCP paid per call with x402", async (t) => {
  const fleet = await startAgentFleet(t, { adminEnv: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '100' } })
  const { gateway, payer, payTo, usdc, request, balanceOf } = fleet
  const network = 'eip155:31337'

  const mcp = new Client({ name: 'paying-agent', version: '1.0.0' })
  await mcp.connect(new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`)))
  t.teardown(() => mcp.close())
  // the devnet's USDC is not one of x402's default assets: allowed by name, capped at the price
  const payments = x402Client.fromConfig({
    schemes: [{ network, client: new ExactEvmScheme(payer) }],
    spendControls: { allowedAssets: [{ network, asset: usdc, maxAmountPerPayment: '10000' }] },
  })

  const call = async (name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) =>
    (await mcp.callTool({ name, arguments: args, ...(meta ? { _meta: meta } : {}) })) as CallToolResult

  /** The spec's `x402/error` wrapper in content[0].text: what clients read when they skip structuredContent. */
  const wrapped = (result: CallToolResult) => JSON.parse((result.content[0] as { text: string }).text)['x402/error']

  t.test('an unpaid call of a paid tool answers the payment requirements as a tool error, as the x402 MCP transport says', async (t) => {
    const unpaid = await call('agent_prompt', { prompt: 'price of ETH' })
    t.equal(unpaid.isError, true)
    const required = unpaid.structuredContent as unknown as PaymentRequired
    t.match(required, {
      x402Version: 2,
      resource: { url: 'mcp://tool/agent_prompt', mimeType: 'application/json' },
      accepts: [{ scheme: 'exact', network, amount: '10000', asset: usdc, payTo }],
    })
    t.match(
      required.extensions?.bazaar,
      { info: { input: { type: 'mcp', toolName: 'agent_prompt', inputSchema: { type: 'object', properties: { prompt: {} } } } } },
      'bazaar lists the MCP tool',
    )
    t.match(required.error, /PaymentPayload in _meta\["x402\/payment"\]/, 'the words say where an MCP client puts the payment')
    t.match(wrapped(unpaid), { code: 402, message: required.error, data: { x402Version: 2, accepts: [{ payTo }] } })

    const bad = await call('agent_prompt', { prompt: 'price of ETH' }, { 'x402/payment': 'not a payload' })
    t.equal(bad.isError, true)
    t.match((bad.content[0] as { text: string }).text, /x402\/payment.*must be an x402 PaymentPayload object/)
  })

  t.test('a paid prompt (a real EIP-3009 payment in _meta) runs its job, answers it, and is charged once', async (t) => {
    const before = { payer: await balanceOf(payer.address), payTo: await balanceOf(payTo) }
    const asked = await call('agent_prompt', { prompt: 'price of ETH' })
    const payment = await payments.createPaymentPayload(asked.structuredContent as unknown as PaymentRequired)
    t.match(payment, { x402Version: 2, accepted: { payTo, amount: '10000' }, payload: { authorization: { from: payer.address } } })

    const paid = await call('agent_prompt', { prompt: 'price of ETH' }, { 'x402/payment': payment })
    t.notOk(paid.isError, JSON.stringify(paid.content))
    const job = paid.structuredContent as any
    t.match(
      job,
      { id: /^job_/, status: 'complete', prompt: 'price of ETH', result: { text: /^ETH: \$[0-9.,]+/, toolCalls: ['get_prices'] } },
      "the job's answer, not only its id",
    )
    t.match(paid._meta?.['x402/payment-response'], { success: true, network, payer: getAddress(payer.address) })

    // the same payment again: refused (its nonce is used), nothing runs, nothing more is charged
    const again = await call('agent_prompt', { prompt: 'price of ETH' }, { 'x402/payment': payment })
    t.equal(again.isError, true)
    t.match((again.structuredContent as any).error, /nonce.*(used|already)/i)

    const settled = await eventually(
      'the payment settled on chain',
      async () => {
        const { body } = await request('/admin/revenue', { key: adminKey })
        const entries = body.recentPayments.filter((p: any) => p.payer === getAddress(payer.address))
        return entries.length === 1 && entries[0].settlement === 'settled' ? entries : undefined
      },
      20_000,
    )
    t.match(
      settled,
      [{ jobId: job.id, route: 'POST /agent/prompt', amount: '10000', txHash: /^0x[0-9a-f]{64}$/ }],
      'one payment, for the job',
    )
    t.equal(await balanceOf(payTo), before.payTo + 10_000n, 'PAY_TO received the price once')
    t.equal(await balanceOf(payer.address), before.payer - 10_000n, 'the payer paid it once')

    // the job was paid for: its other paid tools cost a payment each, as the HTTP routes do
    const look = await call('agent_get_job', { id: job.id })
    t.equal(look.isError, true, 'agent_get_job without a payment asks for one')
    const lookPaid = await call(
      'agent_get_job',
      { id: job.id },
      { 'x402/payment': await payments.createPaymentPayload(look.structuredContent as unknown as PaymentRequired) },
    )
    t.match(lookPaid.structuredContent, { id: job.id, status: 'complete' })
    const skillsAsked = await call('agent_skills', {})
    const skills = await call(
      'agent_skills',
      {},
      { 'x402/payment': await payments.createPaymentPayload(skillsAsked.structuredContent as unknown as PaymentRequired) },
    )
    t.match(skills.structuredContent, { skills: [{ name: String, url: String }] }, "the agent's skills, paid like GET /agent/skills")
  })

  t.test('a paid prompt repeated with its payment id gets the route’s first answer: no second job, no second charge', async (t) => {
    const id = generatePaymentId()
    const withId = x402Client.fromConfig({
      schemes: [{ network, client: new ExactEvmScheme(payer) }],
      spendControls: { allowedAssets: [{ network, asset: usdc, maxAmountPerPayment: '10000' }] },
    })
    withId.onBeforePaymentCreation(async ({ paymentRequired }) => {
      paymentRequired.extensions ??= {}
      appendPaymentIdentifierToExtensions(paymentRequired.extensions, id)
    })
    const asked = (await call('agent_prompt', { prompt: 'price of ARB' })).structuredContent as unknown as PaymentRequired
    const payment = await withId.createPaymentPayload(asked)
    const paid = await call('agent_prompt', { prompt: 'price of ARB' }, { 'x402/payment': payment })
    t.notOk(paid.isError, JSON.stringify(paid.content))
    const job = paid.structuredContent as { id: string; threadId: string; status: string }
    t.match(job, { id: /^job_/, status: 'complete' })

    const again = await call('agent_prompt', { prompt: 'price of ARB' }, { 'x402/payment': payment })
    t.notOk(again.isError, JSON.stringify(again.content))
    t.same(
      Object.keys(again.structuredContent ?? {}).sort(),
      ['deadline', 'jobId', 'status', 'threadId'],
      'the 202 of POST /agent/prompt, stored',
    )
    t.match(
      again.structuredContent,
      { jobId: job.id, threadId: job.threadId, status: 'pending', deadline: Number },
      "the route's first answer (the job as accepted), not the job followed again: its later state is agent_get_job's",
    )
    t.match(again._meta?.['x402/payment-response'], { success: true, payer: getAddress(payer.address) })

    const renewed = await call('agent_prompt', { prompt: 'price of ARB' }, { 'x402/payment': await withId.createPaymentPayload(asked) })
    t.equal(renewed.isError, true)
    t.match(
      (renewed.content[0] as { text: string }).text,
      new RegExp(
        `\\(409\\): payment id ${id} was first used with another payment \\(nonce ${(payment.payload.authorization as { nonce: string }).nonce}\\)`,
      ),
      'a new payment under the id is refused',
    )

    const key = await request('/admin/keys', {
      method: 'POST',
      key: adminKey,
      body: { tier: 'readonly', label: 'jobs', wallet: payer.address },
    })
    const jobs = (await request('/portfolio/jobs?limit=50', { key: key.body.key })).body.jobs as Array<{ id: string; prompt?: string }>
    t.same(
      jobs.filter((j) => j.prompt === 'price of ARB').map((j) => j.id),
      [job.id],
      'one job',
    )
    const charged = await eventually(
      'the payment settled',
      async () => {
        const { body } = await request('/admin/revenue', { key: adminKey })
        const entries = body.recentPayments.filter((p: any) => p.jobId === job.id)
        return entries.length > 0 && entries.every((p: any) => p.settlement === 'settled') ? entries : undefined
      },
      20_000,
    )
    t.equal(charged.length, 1, 'charged once')
  })

  t.test('a payment made for one paid tool is refused by another, and stays good for its own', async (t) => {
    const skillsAsked = (await call('agent_skills', {})).structuredContent as unknown as PaymentRequired
    const forSkills = await payments.createPaymentPayload(skillsAsked)
    const wrong = await call('agent_prompt', { prompt: 'price of ETH' }, { 'x402/payment': forSkills })
    t.equal(wrong.isError, true)
    t.match(
      (wrong.structuredContent as { error: string }).error,
      /^wrong resource: the payment was made for mcp:\/\/tool\/agent_skills, not for POST http:\/\/localhost:\d+\/agent\/prompt/,
    )
    const right = await call('agent_skills', {}, { 'x402/payment': forSkills })
    t.notOk(right.isError, JSON.stringify(right.content))
    t.match(right.structuredContent, { skills: [{ name: String }] })
  })
})
