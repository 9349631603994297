import { freePorts } from '@ats/service-kit/testing'
import OpenAI from 'openai'
import t from 'tap'
import { type Credit, creditFlow } from './creditFlow.ts'
import { eventually, startAgentFleet } from './fleet.ts'

/**
 * A /v1 completion paid by prepaid credit, as a user sees it through the gateway: a wallet tops
 * up with @x402/fetch, signs in once for a session token and gives it to OpenAI's own npm client
 * as its API key. The answer says what it cost (`usage.ats_charged`), which is the tokens and tool
 * calls at the agent's configured prices; the wallet's credit falls by exactly that, and the rest
 * of the hold comes back. (A failed job's hold coming back whole: creditLedger.test.ts.)
 */

const [port] = await freePorts(1)
const publicUrl = `http://127.0.0.1:${port}`
const hold = 100_000n
// prices of ats-planner, USDC base units per 1M tokens, with remainders so that the rounding shows;
// the defaults for unlisted models differ, so a charge at the wrong model's prices shows too
const planner = { input: 3_333_333n, output: 17_777_777n }
const toolCall = 1_234n
const fleet = await startAgentFleet(t, {
  agentEnv: {
    AGENT_CREDIT_MODEL_PRICES: JSON.stringify({ 'ats-planner': { input: Number(planner.input), output: Number(planner.output) } }),
    AGENT_CREDIT_INPUT_PRICE_PER_MTOK: '1000000',
    AGENT_CREDIT_OUTPUT_PRICE_PER_MTOK: '2000000',
    AGENT_CREDIT_TOOL_CALL_PRICE: String(toolCall),
  },
  gatewayEnv: { PORT: String(port), PUBLIC_URL: publicUrl, CREDIT_METERED_HOLD: String(hold) },
  // top-ups become credit once admin settles them on chain: settle and look often
  adminEnv: { SETTLEMENT_ENABLED: 'true', SETTLEMENT_INTERVAL_MS: '100', CREDIT_SWEEP_MS: '50' },
})
const { fundedWallet, toppedUp, sessionTokenOf } = creditFlow(fleet, publicUrl)

t.test(
  'a chat completion paid by a session token: charged its tokens and tool calls at the set prices, the rest of the hold back',
  async (t) => {
    const payer = await fundedWallet(2_000_000n)
    await toppedUp(payer, 1_000_000n)
    const token = await sessionTokenOf(payer)
    t.match(token, /^atcs_/)

    // the wallet's credit as the wallet itself reads it through the gateway
    const credit = async () => {
      const res = await fetch(`${publicUrl}/credit`, { headers: { authorization: `Bearer ${token}` } })
      if (res.status !== 200) throw new Error(`GET /credit answered ${res.status}: ${await res.text()}`)
      return (await res.json()) as Credit
    }
    const before = BigInt((await credit()).available)
    t.equal(before, 1_000_000n, 'the top-up, whole')

    const openai = new OpenAI({ apiKey: token, baseURL: `${publicUrl}/v1`, maxRetries: 0 })
    const { data: completion, response } = await openai.chat.completions
      .create({ model: 'ats-planner', messages: [{ role: 'user', content: 'What is the price of ARB?' }] })
      .withResponse()
    t.match(completion.choices[0]!.message.content, /^ARB: \$/)
    const usage = completion.usage as OpenAI.CompletionUsage & { ats_charged?: string }
    t.ok(usage, 'the answer carries usage')
    t.ok(usage.prompt_tokens > 0 && usage.completion_tokens > 0, 'tokens counted')
    t.match(usage.ats_charged, /^[1-9][0-9]*$/, 'and what it cost, in USDC base units')
    const charged = BigInt(usage.ats_charged!)
    t.equal(response.headers.get('ats-charged'), usage.ats_charged, 'the ATS-Charged header says the same')

    const toolCalls = (completion as unknown as { agent: { tool_calls: unknown[] } }).agent.tool_calls.length
    t.ok(toolCalls > 0, 'the agent called a tool')
    const tokens = BigInt(usage.prompt_tokens) * planner.input + BigInt(usage.completion_tokens) * planner.output
    const expected = (tokens + 999_999n) / 1_000_000n + BigInt(toolCalls) * toolCall
    t.equal(charged, expected, "the tokens at ats-planner's prices, rounded up once, plus each tool call")
    t.ok(charged < hold, 'less than the hold, so something comes back')

    const after = await eventually(
      'the ledger kept the usage report and released the rest',
      async () => {
        const c = await credit()
        return c.held === '0' && c.recent.some((e) => e.kind === 'release') ? c : undefined
      },
      15_000,
    )
    t.equal(BigInt(after.available), before - charged, 'the credit fell by exactly what was charged')
    t.equal(BigInt(after.balance), before - charged)
    const entry = (kind: string) => after.recent.filter((e) => e.kind === kind).map((e) => BigInt(e.amount))
    t.same(entry('hold'), [hold], 'one hold of CREDIT_METERED_HOLD')
    t.same(entry('capture'), [charged], 'what the work used kept')
    t.same(entry('release'), [hold - charged], 'the rest of the hold given back')
  },
)
