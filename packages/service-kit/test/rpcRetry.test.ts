import { endpoint } from '@ats/contracts'
import { connect } from 'nats'
import t, { type Test } from 'tap'
import { Type } from 'typebox'
import { ServiceCallError } from '../src/errors.ts'
import { callEndpoint } from '../src/rpc.ts'
import { freshNamespace, testInfra } from '../src/testing.ts'

/**
 * "No responders" is asked again for a moment (half the timeout, 1.5 s at most): while a NATS
 * cluster fails over, a service's subscriptions are away until it reconnects to another server.
 */
const echo = (namespace: string) =>
  endpoint(`${namespace}.echo.say`, Type.Object({ text: Type.String() }), Type.Object({ text: Type.String() }))

async function setup(t: Test) {
  const { natsUrl } = await testInfra()
  const nc = await connect({ servers: natsUrl })
  t.teardown(() => nc.close())
  return { nc, say: echo(await freshNamespace(t)) }
}

t.test('a responder that subscribes a moment after the request still answers it', async (t) => {
  const { nc, say } = await setup(t)
  const started = Date.now()
  setTimeout(() => {
    nc.subscribe(say.subject, { callback: (_, m) => m.respond(say.reply.encode({ text: `you said ${say.request.decode(m.data).text}` })) })
  }, 300)
  const answer = await callEndpoint(nc, say, { text: 'hello' }, { timeoutMs: 2000 })
  t.same(answer, { text: 'you said hello' })
  t.ok(Date.now() - started >= 250, `answered after the responder came, ${Date.now() - started} ms`)
})

t.test('with no responder at all: 503 after about half the timeout, before the timeout', async (t) => {
  const { nc, say } = await setup(t)
  const started = Date.now()
  const error = await callEndpoint(nc, say, { text: 'anyone?' }, { timeoutMs: 1000 }).catch((e: unknown) => e)
  const took = Date.now() - started
  t.ok(error instanceof ServiceCallError)
  t.equal((error as ServiceCallError).statusCode, 503)
  t.ok(took >= 300 && took < 1000, `503 after ${took} ms`)
})
