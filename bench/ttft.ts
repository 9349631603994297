// by path: the stand-in model is the agent's test helper, not a dependency of the root package
import { startStandInModel } from '../services/agent/src/testing/model.ts'
import { cleanups, runBench, startAgentGateway, startAdmin, startBase, startService } from './fleet.ts'
import { assertPortFree, ready } from './processes.ts'

/**
 * pnpm bench:ttft (the last part of pnpm bench): time to first token through the gateway. The
 * agent runs with a language model, the local stand-in (an OpenAI-compatible server streaming a
 * token every BENCH_TOKEN_MS); a streamed request goes through the gateway (API key, rate limit,
 * proxy), becomes a job, is picked up by a worker whose runner streams from the model, and the
 * first token comes back as a chunk. Measured: ms from sending the request to reading the first
 * text chunk, for the stand-in itself (asked directly) and through the gateway on
 * /v1/chat/completions, /v1/responses and /v1/messages. Aim: each p50 under 50 ms more than the
 * stand-in's own p50.
 *
 * Settings (environment): BENCH_TTFT_ROUNDS (40 per API), BENCH_TOKEN_MS (10), BENCH_TTFT_DEVNET_PORT (8695). About half a minute.
 */
const rounds = Number(process.env.BENCH_TTFT_ROUNDS ?? 40)
const tokenMs = Number(process.env.BENCH_TOKEN_MS ?? 10)
const devnetPort = Number(process.env.BENCH_TTFT_DEVNET_PORT ?? 8695)
const ports = { gateway: 3940, ops: 3950, admin: 3941, agent: 3942 }
const answer = 'ETH trades at 3012.45 USDC on the devnet pools, up 1.25% in a day; ARB at 0.81 USDC. Nothing else moved much today.'

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!

/** ms from the request to the first chunk matching `firstText`; the stream is read to its end (the job completes). */
async function timeToFirstToken(url: string, headers: Record<string, string>, body: unknown, firstText: RegExp): Promise<number> {
  const started = performance.now()
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
  if (res.status !== 200 || !res.body) throw new Error(`${url} answered ${res.status} ${await res.text()}`)
  const decoder = new TextDecoder()
  let seen = ''
  let first: number | undefined
  for await (const chunk of res.body) {
    if (first === undefined) {
      seen += decoder.decode(chunk as Uint8Array, { stream: true })
      if (firstText.test(seen)) first = performance.now() - started
    }
  }
  if (first === undefined) throw new Error(`${url}: no text in the stream: ${seen.slice(0, 500)}`)
  return first
}

await runBench(async () => {
  for (const port of Object.values(ports)) await assertPortFree(port)
  const base = await startBase({ devnetPort })
  const model = await startStandInModel({ answer: () => answer, tokenDelayMs: tokenMs })
  cleanups.push(() => model.close())
  const admin = await startAdmin(base, ports.admin)
  const agent = await startService(base, 'agent', ports.agent, {
    LLM_BASE_URL: model.url,
    LLM_MODEL: 'stand-in',
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
  })
  await ready(`http://127.0.0.1:${ports.admin}`, admin)
  await ready(`http://127.0.0.1:${ports.agent}`, agent)
  const { key } = await startAgentGateway(base, ports, 'ttft')
  const gatewayUrl = `http://127.0.0.1:${ports.gateway}`
  const bearer = { authorization: `Bearer ${key}` }
  const prompt = 'How are ETH and ARB doing?'

  const targets: Array<{ name: string; run: () => Promise<number> }> = [
    {
      name: 'stand-in model, asked directly',
      run: () =>
        timeToFirstToken(
          `${model.url}/chat/completions`,
          {},
          { model: 'stand-in', stream: true, messages: [{ role: 'user', content: prompt }] },
          /"content":"[^"]/,
        ),
    },
    {
      name: 'POST /v1/chat/completions',
      run: () =>
        timeToFirstToken(
          `${gatewayUrl}/v1/chat/completions`,
          bearer,
          { model: 'ats-agent', stream: true, messages: [{ role: 'user', content: prompt }] },
          /"delta":\{"content":"[^"]/,
        ),
    },
    {
      name: 'POST /v1/responses',
      run: () =>
        timeToFirstToken(
          `${gatewayUrl}/v1/responses`,
          bearer,
          { model: 'ats-agent', stream: true, input: prompt },
          /event: response\.output_text\.delta/,
        ),
    },
    {
      name: 'POST /v1/messages',
      run: () =>
        timeToFirstToken(
          `${gatewayUrl}/v1/messages`,
          { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
          { model: 'ats-agent', max_tokens: 1024, stream: true, messages: [{ role: 'user', content: prompt }] },
          /event: content_block_delta/,
        ),
    },
  ]

  const results: Array<{ name: string; p50: number; p99: number }> = []
  for (const target of targets) {
    for (let i = 0; i < 5; i++) await target.run() // warm-up
    const times: number[] = []
    for (let i = 0; i < rounds; i++) times.push(await target.run())
    times.sort((a, b) => a - b)
    results.push({ name: target.name, p50: percentile(times, 50), p99: percentile(times, 99) })
  }

  const ms = (n: number) => `${n.toFixed(1)} ms`
  const own = results[0]!
  console.log(`\ntime to first token (stand-in model, a token every ${tokenMs} ms; ${rounds} requests each, one at a time):`)
  console.log(`  ${own.name.padEnd(34)} p50 ${ms(own.p50)}, p99 ${ms(own.p99)}`)
  for (const r of results.slice(1)) {
    const more = r.p50 - own.p50
    console.log(
      `  ${r.name.padEnd(34)} p50 ${ms(r.p50)}, p99 ${ms(r.p99)}   +${ms(more)} over the model   aim < +50 ms: ${more < 50 ? 'met' : 'NOT met'}`,
    )
  }
  console.log(`  problems logged by the agent:\n${agent.problems()}`)
})
