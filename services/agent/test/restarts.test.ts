import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { baseTestEnv, startService } from '@ats/service-kit/testing'
import t from 'tap'
import { agentService } from '../src/service.ts'
import { eventually, payerHeaders } from './helpers.ts'

/**
 * A local chat-completions server (the model provider's stand-in) that holds every request
 * until the test lets it answer: a job's run waits on it, and a stopping worker aborts it.
 */
async function startHeldModel(t: Parameters<typeof startService>[0]) {
  let held = true
  const waiting: ServerResponse[] = []
  let requests = 0
  const answer = (res: ServerResponse) => {
    const message = { role: 'assistant', content: 'Answered after the restarts.' }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(
      JSON.stringify({
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1,
        model: 'held-1',
        choices: [{ index: 0, message, finish_reason: 'stop' }],
      }),
    )
  }
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      requests++
      if (held) waiting.push(res)
      else answer(res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const res of waiting) res.destroy()
    server.closeAllConnections()
    return new Promise((resolve) => server.close(resolve))
  })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    requests: () => requests,
    release: () => {
      held = false
    },
  }
}

t.test('rolling restarts: a job handed back by more stopping workers than AGENT_MAX_ATTEMPTS still completes', async (t) => {
  const model = await startHeldModel(t)
  const env = {
    ...(await baseTestEnv(t)),
    LLM_BASE_URL: model.url,
    LLM_MODEL: 'held-1',
    AGENT_MAX_ATTEMPTS: '2',
    AGENT_ACK_WAIT_MS: '2000',
    AGENT_WORKER_CONCURRENCY: '1',
  }
  const api = await startService(t, agentService, { ...env, AGENT_ROLE: 'api' })
  const payer = '0x00000000000000000000000000000000000000a1'
  const job = async (id: string) => (await (await fetch(`${api.url}/agent/job/${id}`, { headers: payerHeaders(payer) })).json()) as any
  const accepted = await fetch(`${api.url}/agent/prompt`, {
    method: 'POST',
    headers: { ...payerHeaders(payer), 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'say something' }),
  })
  t.equal(accepted.status, 202)
  const { jobId } = (await accepted.json()) as { jobId: string }

  // three workers in turn (AGENT_MAX_ATTEMPTS is 2): each starts the job, then stops (SIGTERM's path) while it runs
  for (let restart = 1; restart <= 3; restart++) {
    const worker = await startService(t, agentService, { ...env, AGENT_ROLE: 'worker' })
    await eventually(`worker ${restart} to run the job`, async () => {
      const current = await job(jobId)
      if (current.status === 'failed') throw new Error(`the job failed: ${current.error}`)
      return model.requests() === restart && current.status === 'running' ? true : undefined
    })
    await worker.close()
  }
  t.equal((await job(jobId)).status, 'running', 'handed back: its lease given up, for the next worker (the status stays running)')

  model.release()
  await startService(t, agentService, { ...env, AGENT_ROLE: 'worker' })
  const done = await eventually('the job to finish', async () => {
    const current = await job(jobId)
    return ['complete', 'failed', 'cancelled'].includes(current.status) ? current : undefined
  })
  t.equal(done.status, 'complete', done.error)
  t.equal(done.result?.text, 'Answered after the restarts.')
  t.equal(model.requests(), 4, 'run four times: three cut short by a stop, then to the end')
})
