import Fastify from 'fastify'

/** The route the benchmark calls, standing in for a fast service answer (no I/O). */
const app = Fastify()
const body = { prices: { WETH: { price: 3120.55, change24h: 1.2 }, ARB: { price: 0.82, change24h: -0.4 } }, cached: true }
app.get('/market/prices', async () => body)
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`${address}\n`)
