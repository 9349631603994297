import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { x402Client } from '@x402/core/client'
import type { PaymentRequired } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import t from 'tap'
import { getAddress } from 'viem'
import { adminKey, eventually, startAgentFleet } from './fleet.ts'

/**
 * The agent's tools over MCP without an API key, paid per call with x402 as the MCP transport of
 * x402 specifies (transports-v2/mcp.md): an unpaid call answers the PaymentRequired as a tool
 * error; the client's x402 library (@x402/core with the exact EVM scheme) signs a real EIP-3009
 * authorization for it, sent in `_meta["x402/payment"]`; the paid prompt runs its job, the tool
 * answers the job's answer with `_meta["x402/payment-response"]`, and the payment is settled on
 * the devnet once, however often the same payment is sent again.
 */
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
