import Fastify from 'fastify'

/** The routes the benchmark calls, standing in for fast service answers (no I/O). */
const app = Fastify()
const body = { prices: { WETH: { price: 3120.55, change24h: 1.2 }, ARB: { price: 0.82, change24h: -0.4 } }, cached: true }
app.get('/market/prices', async () => body)
// the paid route (/agent/* is x402-paid at the gateway): a small fixed answer as well
const skills = {
  skills: [
    { name: 'quote', description: 'price a swap' },
    { name: 'portfolio', description: 'summarise holdings' },
  ],
}
app.get('/agent/skills', async () => skills)
// /v1 (keyed, or metered from credit): a small fixed completion
const completion = {
  id: 'chatcmpl-bench',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' } }],
}
app.post('/v1/chat/completions', async () => completion)
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`${address}\n`)
