import Anthropic from '@anthropic-ai/sdk'
import { startStandInModel } from '@ats/agent/testing'
import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { startAgentFleet } from './fleet.ts'

/**
 * Token streaming through the gateway, as the official clients see it: the agent's runner is a
 * language model (the local OpenAI-compatible stand-in, a token every 40 ms), and on each of the
 * three APIs the first piece of text reaches the client while the model is still writing: before
 * the stand-in sent its last token. The pieces join to the whole answer.
 */
const answer = 'ETH trades at 3012.45 USDC on the devnet pools today, up 1.25% in a day, and ARB at 0.81 USDC; nothing else moved much.'
const model = await startStandInModel({ answer: () => answer, tokenDelayMs: 40 })
t.teardown(() => model.close())
const fleet = await startAgentFleet(t, { agentEnv: { LLM_BASE_URL: model.url, LLM_MODEL: 'stand-in' } })
const { key } = await fleet.createKey('readwrite', 'token streaming')
const openai = new OpenAI({ apiKey: key, baseURL: `${fleet.gateway.url}/v1`, maxRetries: 0 })
const anthropic = new Anthropic({ apiKey: key, baseURL: fleet.gateway.url, maxRetries: 0 })
const prompt = 'How are ETH and ARB doing?'

/** The model's request for the job just run (the last one it answered). */
const lastModelRequest = () => model.requests.at(-1)!

/** The text pieces as they arrived; the first must come before the model's last token. */
function checkStreamed(t: Test, pieces: Array<{ text: string; at: number }>) {
  t.equal(pieces.map((p) => p.text).join(''), answer, 'the pieces join to the answer')
  t.ok(pieces.length > 10, `in many pieces (${pieces.length})`)
  const { sent } = lastModelRequest()
  t.ok(lastModelRequest().stream, 'the runner asked the model to stream')
  t.ok(pieces[0]!.at < sent.last!, `the first piece arrived ${sent.last! - pieces[0]!.at} ms before the model sent its last token`)
}

t.test('/v1/chat/completions: chunks as the model writes', async (t) => {
  const stream = await openai.chat.completions.create({ model: 'ats-agent', messages: [{ role: 'user', content: prompt }], stream: true })
  const pieces: Array<{ text: string; at: number }> = []
  for await (const chunk of stream) {
    const text = chunk.choices[0]?.delta.content
    if (text) pieces.push({ text, at: Date.now() })
  }
  checkStreamed(t, pieces)
})

t.test('/v1/responses: response.output_text.delta events as the model writes', async (t) => {
  const stream = await openai.responses.create({ model: 'ats-agent', input: prompt, stream: true })
  const pieces: Array<{ text: string; at: number }> = []
  let done: string | undefined
  for await (const event of stream) {
    if (event.type === 'response.output_text.delta') pieces.push({ text: event.delta, at: Date.now() })
    if (event.type === 'response.completed') done = (event.response.output[0] as { content: Array<{ text: string }> }).content[0]!.text
  }
  checkStreamed(t, pieces)
  t.equal(done, answer, 'the completed response has the same text')
})

t.test('/v1/messages: content_block_delta events as the model writes', async (t) => {
  const pieces: Array<{ text: string; at: number }> = []
  const stream = anthropic.messages.stream({ model: 'ats-agent', max_tokens: 1024, messages: [{ role: 'user', content: prompt }] })
  stream.on('text', (text) => pieces.push({ text, at: Date.now() }))
  const message = await stream.finalMessage()
  checkStreamed(t, pieces)
  t.equal(message.content.length, 1, 'one text block')
  t.equal((message.content[0] as { text: string }).text, answer, 'the final message has the same text')
})
