import { identityHeaders } from '@ats/contracts'
import { baseTestEnv, startService, testInternalToken } from '@ats/service-kit/testing'
import t from 'tap'
import { agentService } from '../src/service.ts'

// A paid request the gateway lets through again (payment id): its x-ats-idempotency-key makes
// the agent answer with the first result. Two API replicas on one database, no workers needed.
const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), AGENT_ROLE: 'api' }
const replicas = [await startService(t, agentService, env), await startService(t, agentService, env)]
const payer = '0x70997970c51812dc3a010c7d01b50e0d17dc79c8'
const keyOf = (id: string) => `${payer}:${id}:0x${'ab'.repeat(32)}`

async function send(via: number, method: string, path: string, key: string | undefined, body?: unknown) {
  const res = await fetch(`${replicas[via]!.url}${path}`, {
    method,
    headers: {
      [identityHeaders.internalToken]: testInternalToken,
      [identityHeaders.ownerId]: payer,
      ...(key ? { [identityHeaders.idempotencyKey]: key } : {}),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
  return { status: res.status, body: (await res.json()) as any }
}

t.test('10 concurrent prompts with one idempotency key on two replicas start one job; all get it with 202', async (t) => {
  const key = keyOf('pay_concurrent_prompt_0001')
  const answers = await Promise.all(
    Array.from({ length: 10 }, (_, i) => send(i % 2, 'POST', '/agent/prompt', key, { prompt: 'price of ETH' })),
  )
  t.same(new Set(answers.map((a) => a.status)), new Set([202]))
  t.equal(new Set(answers.map((a) => a.body.jobId)).size, 1, 'one job id')
  t.equal(new Set(answers.map((a) => a.body.threadId)).size, 1, 'one thread')
  const thread = await send(0, 'GET', `/agent/thread/${answers[0]!.body.threadId}`, undefined)
  t.equal(thread.body.messages.length, 1, 'one user message: one job was created')

  const other = await send(1, 'POST', '/agent/prompt', key, { prompt: 'price of ARB' })
  t.equal(other.status, 409, 'the key with another prompt')
  t.match(other.body, { error: /was used with a different request/ })
  const fresh = await send(0, 'POST', '/agent/prompt', undefined, { prompt: 'price of ETH' })
  t.not(fresh.body.jobId, answers[0]!.body.jobId, 'without the key the same prompt is a new job')
})

t.test('a cancel sent again with its key answers as the first did', async (t) => {
  const job = await send(0, 'POST', '/agent/prompt', undefined, { prompt: 'price of GMX' })
  const key = keyOf('pay_cancel_repeated_00001')
  const first = await send(0, 'DELETE', `/agent/job/${job.body.jobId}`, key)
  t.same(first, { status: 200, body: { success: true, jobId: job.body.jobId } })
  t.same(await send(1, 'DELETE', `/agent/job/${job.body.jobId}`, key), first, 'the same answer, not "already finished"')
  t.equal((await send(1, 'DELETE', `/agent/job/${job.body.jobId}`, undefined)).status, 404, 'a new cancel of the finished job is refused')
})
